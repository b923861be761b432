package backup

import (
	"errors"
	"fmt"
	"time"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/journal"
)

// A backup applies most batches in windows (apply.Window): one after
// another into the page cache, then one syncfs of the volume and one
// progress write for the lot, instead of a syncfs and two progress writes
// per batch. A window ends when the next batch would make it unredoable,
// when it holds windowMaxBatches or windowMaxBytes, after windowMaxAge,
// and windowIdle after the last batch when no more are waiting; the batch
// that ended it starts the next. A batch even an empty window cannot take
// is applied alone, as before windows: "applying" is recorded first,
// "applied" after its syncfs. The byte limit keeps a
// window's syncfs short: one that flushes many MiB of the volume holds up
// the next batch's journal sync behind it (32 MiB windows of 256 KiB
// batches stalled barriers for 100 ms).
var (
	windowMaxBatches       = 256
	windowMaxBytes   int64 = 1 << 20
	windowMaxAge           = time.Second
	windowIdle             = 20 * time.Millisecond
)

// applyWindow is the apply loop's window and when it began.
type applyWindow struct {
	apply.Window
	started time.Time
	gen     uint64 // b.resyncs when it began: a resync discards it
}

// applyLoop applies durable batches in order until Close. Progress is
// kept in two numbers (progress.go): "applied", the newest batch whose
// effects a syncfs made durable, and "applying", a batch applied alone
// that may have touched the volume since. Batches applied in a window
// after "applied" are found again at a restart (recoverWindow).
func (b *Backup) applyLoop() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	w := &applyWindow{gen: b.resyncs.Load()}
	defer func() {
		if err := b.syncWindow(w); err != nil {
			b.log.Error("sync the volume at close", "err", err)
		}
	}()
	if seq := b.retrySeq; seq != 0 {
		if err := b.retryApply(seq, b.retryErr); err == errClosing {
			return
		} else if err != nil && err != errSuperseded {
			b.stall(seq, fmt.Errorf("torn batch: %w", err))
		}
	}
	for {
		var idle <-chan time.Time
		if w.Len() > 0 {
			idle = time.After(windowIdle)
		}
		select {
		case <-b.done:
			return
		case <-b.kick:
		case <-t.C:
		case <-idle:
			if err := b.syncWindow(w); err != nil {
				b.stall(b.applied.Load(), fmt.Errorf("sync the volume: %w", err))
			}
		}
		for !b.stalled.Load() {
			select {
			case <-b.done:
				return
			default:
			}
			next := b.applied.Load() + 1
			if next > b.complete.Load() {
				break
			}
			err := b.applyNext(w, next)
			if err != nil && transientApply(err) {
				// What the window applied before this batch becomes
				// durable; the batch is then retried alone.
				if serr := b.syncWindow(w); serr != nil {
					err = serr
				} else {
					err = b.retryApply(next, err)
				}
			}
			if err == errSuperseded {
				break
			}
			if err != nil {
				select {
				case <-b.done: // closing: the batch is torn, not failed
					return
				default:
				}
				w.Reset()
				b.stall(next, err)
			}
		}
	}
}

// applyNext applies batch seq: in the window if it takes it, else alone
// after a sync of the window.
func (b *Backup) applyNext(w *applyWindow, seq uint64) error {
	batch, size, err := b.batch(seq)
	if err != nil {
		return err
	}
	if gen := b.resyncs.Load(); w.gen != gen {
		w.Reset()
		w.gen = gen
	}
	admitted := w.fits(size) && w.Admit(batch, size)
	if !admitted && w.Len() > 0 {
		// Full, or the batch would make it unredoable: the window is
		// synced, and the batch may start the next one.
		if err := b.syncWindow(w); err != nil {
			return err
		}
		admitted = w.fits(size) && w.Admit(batch, size)
	}
	if !admitted {
		return b.applyDecoded(seq, batch, b.applier.Apply)
	}
	if w.Len() == 1 {
		w.started = time.Now()
	}
	if err := b.applier.ApplyUnsynced(batch); err != nil {
		return wrapApply(seq, err)
	}
	b.setApplied(seq)
	return nil
}

// fits reports whether a batch of size encoded bytes stays within the
// window's limits.
func (w *applyWindow) fits(size int64) bool {
	return w.Len() < windowMaxBatches && w.Bytes()+size <= windowMaxBytes &&
		(w.Len() == 0 || time.Since(w.started) < windowMaxAge)
}

// syncWindow makes the batches applied in w durable: a syncfs of the
// volume, then "applied" recorded. A resync since the window began
// replaced the volume and its progress: the window is dropped.
func (b *Backup) syncWindow(w *applyWindow) error {
	if w.Len() == 0 {
		return nil
	}
	defer w.Reset()
	if err := b.syncVolume(); err != nil {
		return err
	}
	b.mu.Lock() // endResync writes the progress under mu
	defer b.mu.Unlock()
	if b.resyncs.Load() != w.gen || b.stalled.Load() {
		return nil
	}
	applied := b.applied.Load()
	if err := b.prog.save(applied, 0); err != nil {
		return err
	}
	b.synced.Store(applied)
	return nil
}

// applyOne applies batch seq alone with run (Apply, Redo or a Resume).
func (b *Backup) applyOne(seq uint64, run func(*journal.Batch) error) error {
	batch, _, err := b.batch(seq)
	if err != nil {
		return err
	}
	return b.applyDecoded(seq, batch, run)
}

// batch returns batch seq, decoded, as the stream stored it or else read
// from the journal; size is its encoded length.
func (b *Backup) batch(seq uint64) (*journal.Batch, int64, error) {
	if batch, size := b.decoded.take(seq); batch != nil {
		return batch, size, nil
	}
	enc, err := b.store.Get(seq)
	if err != nil {
		return nil, 0, err
	}
	batch, err := journal.Decode(enc)
	if err != nil {
		return nil, 0, err
	}
	return batch, int64(len(enc)), nil
}

// applyDecoded applies batch seq alone: "applying" is recorded before it
// touches the volume and "applied" after run, which syncs it.
func (b *Backup) applyDecoded(seq uint64, batch *journal.Batch, run func(*journal.Batch) error) error {
	if err := b.prog.save(b.applied.Load(), seq); err != nil {
		return err
	}
	if err := run(batch); err != nil {
		return wrapApply(seq, err)
	}
	if err := b.prog.save(seq, 0); err != nil {
		return err
	}
	b.synced.Store(seq)
	b.setApplied(seq)
	return nil
}

func wrapApply(seq uint64, err error) error {
	if _, ok := errors.AsType[*apply.OpError](err); ok {
		return err // it names the batch and the op
	}
	return fmt.Errorf("apply batch %d: %w", seq, err)
}
