package backup

import (
	"errors"
	"fmt"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/journal"
)

// Recovery of a volume a stop left in the middle of applying: a batch
// applied alone (recoverTorn) or an apply window (recoverWindow).

// recoverTorn finishes a batch the last run was killed in the middle of.
// If the machine has not rebooted since, the apply mark says exactly
// where it stopped and the batch is resumed there (apply.Resume). Else a
// tolerant redo is used when that is exact (apply.Redoable), and
// otherwise the backup stalls until a resync.
func (b *Backup) recoverTorn(seq uint64) {
	if mseq, index, ino, ok := b.mark.read(); ok && mseq <= seq {
		run := func(batch *journal.Batch) error { return b.applier.Resume(batch, index, ino) }
		if mseq < seq {
			run, index = b.applier.Apply, 0 // the batch never reached its first op
		}
		b.log.Warn("the last run was killed while applying a batch; resuming it where it stopped", "seq", seq, "op", index)
		if err := b.applyOne(seq, run); err != nil {
			b.tornFailed(seq, err)
		}
		return
	}
	batch, _, err := b.batch(seq)
	if err == nil && !apply.Redoable(batch) {
		err = errors.New("the machine rebooted since, and the batch reuses names, so a redo cannot know how far it got")
	}
	if err == nil {
		b.log.Warn("the last run was killed while applying a batch; redoing it", "seq", seq)
		err = b.applyOne(seq, b.applier.Redo)
	}
	if err != nil {
		b.tornFailed(seq, err)
	}
}

// tornFailed handles a torn batch whose recovery failed: for want of a
// resource the apply loop retries it (the marks this run wrote say where
// it stopped), else the backup stalls.
func (b *Backup) tornFailed(seq uint64, err error) {
	if transientApply(err) {
		b.retrySeq, b.retryErr = seq, err
		return
	}
	b.stall(seq, fmt.Errorf("torn batch: %w", err))
}

// recoverWindow finds the batches an apply window may have applied after
// the last synced one (the progress file's "applied") and makes the volume
// hold them, durably. In the same boot the apply mark says where the
// window stopped: every batch before the marked one is whole in the page
// cache, and the marked one is resumed at its op. After a reboot nothing
// says how far the window got, or which of its writes reached the disk:
// the window is rebuilt from the journal with the rule that made it
// (apply.Window) and every batch it admits is redone, which is exact
// whatever part of them the disk holds, and for the ones never applied.
func (b *Backup) recoverWindow() {
	a := b.applied.Load()
	complete := b.complete.Load()
	if mseq, index, ino, ok := b.mark.read(); ok {
		if mseq <= a || mseq > complete {
			return
		}
		if err := b.applier.Sync(); err != nil {
			b.stall(mseq, err)
			return
		}
		b.setApplied(mseq - 1)
		b.synced.Store(mseq - 1)
		b.log.Warn("the last run was stopped inside an apply window; resuming it where it stopped", "from", a+1, "seq", mseq, "op", index)
		if err := b.applyOne(mseq, func(batch *journal.Batch) error { return b.applier.Resume(batch, index, ino) }); err != nil {
			b.tornFailed(mseq, err)
		}
		return
	}
	var w apply.Window
	var batches []*journal.Batch
	for seq := a + 1; seq <= complete && w.Len() < windowMaxBatches; seq++ {
		batch, size, err := b.batch(seq)
		if err != nil || w.Bytes()+size > windowMaxBytes || !w.Admit(batch, size) {
			break
		}
		batches = append(batches, batch)
	}
	if len(batches) == 0 {
		return
	}
	b.log.Warn("the machine stopped with an apply window unsynced; redoing it", "from", a+1, "to", a+uint64(len(batches)))
	for _, batch := range batches {
		if err := b.applier.RedoUnsynced(batch); err != nil {
			b.windowRedoFailed(batch.Seq, err)
			return
		}
		b.setApplied(batch.Seq)
	}
	last := a + uint64(len(batches))
	err := b.applier.Sync()
	if err == nil {
		err = b.prog.save(last, 0)
	}
	if err != nil {
		b.stall(last, err)
		return
	}
	b.synced.Store(last)
}

// windowRedoFailed handles a batch of a window whose redo failed: what was
// redone before it is made durable, and the batch is then retried alone
// (for want of a resource) or the backup stalls.
func (b *Backup) windowRedoFailed(seq uint64, err error) {
	if serr := b.applier.Sync(); serr != nil {
		err = errors.Join(err, serr)
	} else if perr := b.prog.save(seq-1, seq); perr != nil {
		err = errors.Join(err, perr)
	} else {
		b.synced.Store(seq - 1)
	}
	b.tornFailed(seq, err)
}
