package replicate

import (
	"errors"
	"fmt"
	"time"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/journal"
)

// applyLoop applies durable batches in order until Close. Progress is
// kept in two numbers (progress.go): "applying" is written before a batch
// touches the volume, "applied" after the batch and a syncfs of the
// volume, so a restart knows whether it was killed in the middle of one.
func (b *Backup) applyLoop() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	if seq := b.retrySeq; seq != 0 {
		if err := b.retryApply(seq, b.retryErr); err == errClosing {
			return
		} else if err != nil && err != errSuperseded {
			b.stall(seq, fmt.Errorf("torn batch: %w", err))
		}
	}
	for {
		select {
		case <-b.done:
			return
		case <-b.kick:
		case <-t.C:
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
			err := b.applyOne(next, b.applier.Apply)
			if err != nil && transientApply(err) {
				err = b.retryApply(next, err)
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
				b.stall(next, err)
			}
		}
	}
}

// applyOne applies batch seq with run (Apply, Redo or a Resume).
func (b *Backup) applyOne(seq uint64, run func(*journal.Batch) error) error {
	enc, err := b.store.Get(seq)
	if err != nil {
		return err
	}
	batch, err := journal.Decode(enc)
	if err != nil {
		return err
	}
	// The previous batch's "applied" may have said "applying" for this
	// one already, in the same write (below).
	if b.applyingNext.Load() != seq {
		if err := b.prog.save(b.applied.Load(), seq); err != nil {
			return err
		}
	}
	b.applyingNext.Store(0)
	if err := run(batch); err != nil {
		if _, ok := errors.AsType[*apply.OpError](err); ok {
			return err // it names the batch and the op
		}
		return fmt.Errorf("apply batch %d: %w", seq, err)
	}
	// When the next batch is ready, say it is being applied in the same
	// write as this one's "applied": one progress sync per batch, not two.
	// Recovery reads an "applying" whose batch never reached its first op
	// as such (the apply mark names an earlier batch).
	if next := seq + 1; next <= b.complete.Load() && !b.stalled.Load() {
		if err := b.prog.save(seq, next); err != nil {
			return err
		}
		b.applyingNext.Store(next)
	} else if err := b.prog.save(seq, 0); err != nil {
		return err
	}
	b.setApplied(seq)
	return nil
}
