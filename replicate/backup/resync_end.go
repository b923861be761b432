package backup

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
)

// How a backup's resync ends: what a deposed primary's discarded suffix
// leaves aside, the volume's new state recorded, or the failure noted.

// keepDiscarded exports the batches this resync is about to discard that
// the new history lacks, into a journal of their own beside this one
// (`pbfs journal ls --journal` reads it): what a deposed primary wrote in
// its last term, or what a backup holds past the snapshot or unlike it.
// A deposed primary's unacknowledged suffix is kept, never silently lost.
func (b *Backup) keepDiscarded(start *replpb.ResyncStart, base uint64) {
	last := b.store.Last()
	if last.Seq == 0 {
		return
	}
	from := start.Seq + 1
	diverged := b.formerEpoch > 0
	if !diverged && last.Seq >= start.Seq && start.Seq > 0 {
		ours, err := b.store.Get(start.Seq)
		h, herr := journal.DecodeHeader(start.Anchor)
		oh, oerr := journal.DecodeHeader(ours)
		diverged = err != nil || herr != nil || oerr != nil || oh.Checksum != h.Checksum
	}
	if acked, _ := b.store.MetaUint(journal.KeyAcked.Name); b.formerEpoch > 0 && acked > 0 {
		// A deposed primary: what its barriers returned is in every
		// history since; what it wrote after is its unacknowledged suffix.
		from = acked + 1
	} else if diverged {
		// Keep all of the journal's last term: where it parted from the
		// new history is not known here.
		from = last.Seq + 1
		b.store.Scan(0, func(seq uint64, enc []byte) error {
			if h, err := journal.DecodeHeader(enc); err == nil && h.Epoch == last.Epoch && seq < from {
				from = seq
			}
			return nil
		})
	}
	if base > 0 {
		from = max(from, base+1)
	}
	if from > last.Seq {
		return
	}
	dir := filepath.Join(b.cfg.Journal, fmt.Sprintf("discarded-epoch%d-%s", last.Epoch, time.Now().UTC().Format("20060102T150405.000")))
	n, err := journal.Export(dir, b.store, from)
	if err != nil {
		b.log.Error("could not keep the batches a resync discards", "from", from, "err", err)
		return
	}
	what := "batches the new primary's history lacks are kept for inspection (pbfs journal ls --journal DIR)"
	if b.formerEpoch > 0 {
		// Its barriers acknowledged none of these, but a backup that was
		// promoted may have received them: the new history can hold them too.
		what = "batches this node wrote as the primary after the last one it recorded as acknowledged are kept for inspection; the new primary may hold some of them too (pbfs journal ls --journal DIR)"
	}
	b.log.Warn(what, "dir", dir, "batches", n, "from", from, "to", last.Seq)
}

func (b *Backup) endResync(start *replpb.ResyncStart) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var anchor []byte
	if len(start.Anchor) > 0 {
		anchor = start.Anchor
	}
	if err := b.store.Reset(anchor); err != nil {
		return err
	}
	b.decoded.reset()
	if start.Epoch > b.store.Epoch() {
		if err := b.store.SetEpoch(start.Epoch); err != nil {
			return err
		}
	}
	b.applier.Forget() // files kept open may have been replaced
	// An apply mark of the volume's earlier life must not pass for one of
	// the batches after the snapshot (recoverWindow).
	if err := b.mark.write(0, 0, 0); err != nil {
		return err
	}
	// The volume is the primary's snapshot now: nothing a mount of this
	// journal left unjournaled (a primary killed here before), nor an
	// offline change it was ahead by. Left marked, a later promotion took
	// its volume for one a crash left ahead and resynced every backup.
	if err := b.store.MarkClosed(); err != nil {
		return err
	}
	if err := b.store.SetMetaUint(journal.KeyAhead.Name, 0); err != nil {
		return err
	}
	// The progress first, "stalled" cleared last: a crash in between
	// leaves the backup stalled, waiting for another resync.
	if err := b.prog.save(start.Seq, 0); err != nil {
		return err
	}
	if err := b.store.SetMetaUints(map[string]uint64{journal.KeyStalled.Name: 0, resyncingKey: 0}); err != nil {
		return err
	}
	if err := b.store.SetMetaUint(formerPrimaryKey, 0); err != nil {
		return err
	}
	b.formerEpoch = 0
	if err := b.store.SetMeta(journal.KeyVolume.Name, []byte(start.VolumeId)); err != nil {
		return err
	}
	b.volumeID = start.VolumeId
	b.applied.Store(start.Seq)
	b.synced.Store(start.Seq)
	b.complete.Store(start.Seq)
	b.m.applied.Set(float64(start.Seq))
	b.m.durable.Set(float64(start.Seq))
	b.stalled.Store(false)
	select {
	case b.kick <- struct{}{}:
	default:
	}
	return nil
}

func (b *Backup) resyncFailed(err error) error {
	b.log.Error("resync failed; the backup stays stalled until the next one", "err", err)
	b.m.resyncFails.Inc()
	return fmt.Errorf("resync: %w", err)
}
