package backup

// A backup's progress: what it holds, what it applied, and a stall.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/health"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/wire"
)

// lastComplete returns the newest seq in st that ends a seal: the last
// one, unless the journal ends inside a group of batches.
func lastComplete(st *journal.Store) uint64 {
	seq := st.Last().Seq
	for ; seq > 0; seq-- {
		enc, err := st.Get(seq)
		if err != nil {
			return seq // trimmed: applied long ago
		}
		if h, err := journal.DecodeHeader(enc); err != nil || !h.More() {
			return seq
		}
	}
	return 0
}

// stall stops applying for good (until a resync) and persists that.
func (b *Backup) stall(seq uint64, err error) {
	b.stalled.Store(true)
	b.m.applyFailures.Inc()
	b.log.Error("the backup stops applying and needs a resync", "seq", seq, "err", err)
	b.cfg.Events.Emit(events.KindStalled, "seq", seq, "err", err.Error())
	if perr := b.store.SetMetaUint(journal.KeyStalled.Name, seq); perr != nil {
		b.log.Error("record stall", "err", perr)
	}
	b.notifyProgress() // tell the primary
}

// notifyProgress wakes what waits for the backup's progress: the acks
// (stream.go) and WaitApplied.
func (b *Backup) notifyProgress() {
	b.progressMu.Lock()
	close(b.progress)
	b.progress = make(chan struct{})
	b.progressMu.Unlock()
}

// Status is what a backup holds.
type Status struct {
	VolumeID   string
	DurableSeq uint64
	// CompleteSeq is the newest durable seq that ends a seal: what a
	// promotion of this backup can apply.
	CompleteSeq uint64
	AppliedSeq  uint64
	Epoch       uint64
	// Fenced is the epoch the backup was fenced at (fence.go): it refuses
	// primaries of that epoch or below.
	Fenced uint64
	// FormerEpoch, if not 0: the journal served the primary of that
	// epoch, and waits for the resync that makes it a backup's. Stalled
	// since, it acknowledged nothing; what it holds past its backups was
	// never acknowledged (coord's election).
	FormerEpoch uint64
	Stalled     bool
	// ApplyBlocked: a batch it cannot apply and retries, in words
	// (applyblock.go); "" while it applies.
	ApplyBlocked string
	Policy       wire.AckPolicy // the last primary's
	// Streaming: a primary's stream is up.
	Streaming bool
}

// Status reports the backup's progress.
func (b *Backup) Status() Status {
	blocked, _ := b.blockedWords()
	b.mu.Lock()
	defer b.mu.Unlock()
	return Status{VolumeID: b.volumeID, DurableSeq: b.store.Last().Seq, CompleteSeq: b.complete.Load(), AppliedSeq: b.applied.Load(),
		Epoch: b.store.Epoch(), Fenced: b.fenced.Load(), FormerEpoch: b.formerEpoch, Stalled: b.stalled.Load(), ApplyBlocked: blocked, Policy: b.policy,
		Streaming: b.streams.Load() > 0}
}

// WaitApplied waits until seq is applied (tests and promotion use it).
func (b *Backup) WaitApplied(ctx context.Context, seq uint64) error {
	for b.applied.Load() < seq {
		if b.stalled.Load() {
			return errors.New("backup stalled: apply failed")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// appliedChanged returns a channel closed when the applied seq advances.
func (b *Backup) appliedChanged() <-chan struct{} {
	b.progressMu.Lock()
	defer b.progressMu.Unlock()
	return b.progress
}

func (b *Backup) setApplied(seq uint64) {
	b.applied.Store(seq)
	b.m.applied.Set(float64(seq))
	b.notifyProgress()
}

// Events is the backup's stream of state changes (nil: none kept).
func (b *Backup) Events() *events.Bus { return b.cfg.Events }

// Journal is the backup's journal store, for reading (the control
// socket's journal listing).
func (b *Backup) Journal() *journal.Store { return b.store }

// Health reports whether the backup serves its role (/readyz), with why
// not, one line each with the remedy: no primary streams to it, it cannot
// apply what it holds, or its journal has no room. It reads only memory.
func (b *Backup) Health() health.Report {
	st := b.Status()
	r := health.Report{Role: health.RoleBackup, Epoch: st.Epoch, LastSeq: st.DurableSeq, AppliedSeq: st.AppliedSeq}
	r.Problems = b.problems(st)
	return r.Judge()
}

func (b *Backup) problems(st Status) []string {
	var out []string
	if !st.Streaming {
		out = append(out, "no primary streams to this backup: start the primary with --backup naming this backup's address, or check the token and the network (the primary's pbfs status says why)")
	}
	if st.FormerEpoch != 0 {
		out = append(out, fmt.Sprintf("this journal served the primary of epoch %d and waits for the new primary's resync", st.FormerEpoch))
	}
	if st.Stalled {
		out = append(out, "stalled: it cannot apply what it holds; the primary resyncs it once connected (pbfs resync on the primary)")
	}
	if st.ApplyBlocked != "" {
		out = append(out, st.ApplyBlocked)
	}
	if b.store.Refusing() {
		out = append(out, "its journal's file system is down to its reserve: it acks nothing until there is room (free space there, or lower --journal-reserve)")
	}
	return out
}
