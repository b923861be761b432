package replicate

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
)

// Resync makes this backup's volume and journal equal to the primary's
// snapshot (see the proto). The backup is marked stalled, durably, from the
// start until the end, so a crash in the middle leaves it needing another
// resync, never looking good.
func (b *Backup) Resync(stream replpb.Replication_ResyncServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil || start.BlockSize == 0 || start.BlockSize > 16<<20 {
		return status.Error(codes.InvalidArgument, "resync must start with ResyncStart")
	}
	if err := b.beginResync(start); err != nil {
		return err
	}
	b.log.Info("resync started", "seq", start.Seq, "epoch", start.Epoch)
	rc := b.applier.Reconciler()
	var pending *apply.Spec
	finish := func() error {
		if pending == nil {
			return nil
		}
		err := rc.Finish(pending)
		pending = nil
		return err
	}
	blocks := uint64(0)
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		switch {
		case msg.GetEntry() != nil:
			if err := finish(); err != nil {
				return b.resyncFailed(err)
			}
			e := msg.GetEntry()
			spec := &apply.Spec{Path: string(e.Path), Mode: e.Mode, UID: e.Uid, GID: e.Gid, Size: e.Size, Target: string(e.Target),
				Rdev: e.Rdev, Xattrs: replpb.XattrMap(e.Xattrs), LinkTo: string(e.LinkTo), Mtime: e.MtimeNs}
			compare, err := rc.Ensure(spec)
			if err != nil {
				return b.resyncFailed(err)
			}
			pending = spec
			if spec.Mode&0o170000 == 0o100000 && spec.LinkTo == "" {
				if err := theirSums(e, start.BlockSize).Check(e.Size, int(start.BlockSize)); err != nil {
					return b.resyncFailed(fmt.Errorf("resync %q: %w", e.Path, err))
				}
				var want []uint64
				if compare {
					want, err = rc.Compare(spec.Path, int(start.BlockSize), theirSums(e, start.BlockSize), rc.Fresh(spec.Path))
				}
				if err != nil {
					return b.resyncFailed(err)
				}
				if len(want) > 0 && !rc.Fresh(spec.Path) {
					rc.Changed++
				}
				if err := stream.Send(&replpb.ResyncBackupMsg{Msg: &replpb.ResyncBackupMsg_Want{Want: &replpb.Want{Path: e.Path, Blocks: want}}}); err != nil {
					return err
				}
			}
		case msg.GetBlock() != nil:
			bl := msg.GetBlock()
			if pending == nil || string(bl.Path) != pending.Path || len(bl.Data) > int(start.BlockSize) {
				return b.resyncFailed(errors.New("block for a file not being resynced"))
			}
			if err := rc.WriteBlock(pending.Path, int64(bl.Index)*int64(start.BlockSize), bl.Data); err != nil {
				return b.resyncFailed(err)
			}
			blocks++
		case msg.GetDone() != nil:
			if err := finish(); err != nil {
				return b.resyncFailed(err)
			}
			if err := rc.Done(); err != nil {
				return b.resyncFailed(err)
			}
			if err := b.endResync(start); err != nil {
				return b.resyncFailed(err)
			}
			b.log.Info("resync done", "seq", start.Seq, "files_changed", rc.Changed, "blocks_received", blocks, "removed", rc.Removed)
			return stream.Send(&replpb.ResyncBackupMsg{Msg: &replpb.ResyncBackupMsg_Result{Result: &replpb.ResyncResult{
				FilesChanged: uint64(rc.Changed), BlocksReceived: blocks, Removed: uint64(rc.Removed)}}})
		default:
			return b.resyncFailed(errors.New("unexpected resync message"))
		}
	}
}

func (b *Backup) beginResync(start *replpb.ResyncStart) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.volumeID != "" && b.volumeID != start.VolumeId {
		return status.Errorf(codes.FailedPrecondition, "this backup serves volume %s, not %s", b.volumeID, start.VolumeId)
	}
	if !b.cfg.Adopt && b.store.Last().Seq == 0 && b.applied.Load() == 0 {
		// Never held a batch: this is its first resync (adopt.go).
		if err := b.refuseForeignVolume(start.VolumeId); err != nil {
			return err
		}
	}
	if b.fencedOut(start.Epoch) {
		b.m.rejected.WithLabelValues("fenced").Inc()
		return status.Errorf(codes.PermissionDenied, "epoch %d ended: this backup was fenced at epoch %d, and this primary was deposed", start.Epoch, b.fenced.Load())
	}
	if e := b.store.Epoch(); start.Epoch < e {
		b.m.rejected.WithLabelValues("stale_epoch").Inc()
		return status.Errorf(codes.PermissionDenied, "epoch %d is below %d: this primary was deposed", start.Epoch, e)
	}
	if b.active != nil {
		b.active.cancel()
		b.active = nil
	}
	b.stalled.Store(true) // stops the apply loop
	b.resyncs.Add(1)      // and drops its window
	b.decoded.reset()
	if err := b.store.SetMetaUint("stalled", start.Seq+1); err != nil {
		return err
	}
	b.keepDiscarded(start)
	return nil
}

// keepDiscarded exports the batches this resync is about to discard that
// the new history lacks, into a journal of their own beside this one
// (`pbfs journal ls --journal` reads it): what a deposed primary wrote in
// its last term, or what a backup holds past the snapshot or unlike it.
// A deposed primary's unacknowledged suffix is kept, never silently lost.
func (b *Backup) keepDiscarded(start *replpb.ResyncStart) {
	last := b.store.Last()
	if last.Seq == 0 {
		return
	}
	from := start.Seq + 1
	diverged := b.formerPrimary
	if !diverged && last.Seq >= start.Seq && start.Seq > 0 {
		ours, err := b.store.Get(start.Seq)
		h, herr := journal.DecodeHeader(start.Anchor)
		oh, oerr := journal.DecodeHeader(ours)
		diverged = err != nil || herr != nil || oerr != nil || oh.Checksum != h.Checksum
	}
	if acked, _ := b.store.MetaUint(AckedKey); b.formerPrimary && acked > 0 {
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
	if b.formerPrimary {
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
	if err := b.store.SetMetaUint(AheadKey, 0); err != nil {
		return err
	}
	// The progress first, "stalled" cleared last: a crash in between
	// leaves the backup stalled, waiting for another resync.
	if err := b.prog.save(start.Seq, 0); err != nil {
		return err
	}
	if err := b.store.SetMetaUint("stalled", 0); err != nil {
		return err
	}
	if err := b.store.SetMeta("volume", []byte(start.VolumeId)); err != nil {
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

// theirSums is what e says of its file's blocks.
func theirSums(e *replpb.Entry, blockSize uint32) apply.Sums {
	if !e.SparseSums {
		return apply.Sums{Blocks: uint64(len(e.BlockSums)), Sums: e.BlockSums}
	}
	return apply.Sums{Blocks: (e.Size + uint64(blockSize) - 1) / uint64(blockSize), Sparse: true, Index: e.SumBlocks, Sums: e.BlockSums}
}
