package backup

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/sparse"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/resyncscope"
)

// Resync makes this backup's volume and journal equal to the primary's
// snapshot (see the proto). The backup is marked stalled, durably, from the
// start until the end, so a crash in the middle leaves it needing another
// resync, never looking good.
//
// Each message is handled under resyncMu, after checking that the resync
// is still current: a newer resync, a fence of its epoch or a primary of a
// higher epoch ends it, and then nothing more of it touches the volume or
// the journal (two resyncs writing the same volume, the older one ending
// last, would leave the older snapshot). Replies go out after resyncMu is
// released: a primary that stopped reading must not hold up the next one.
func (b *Backup) Resync(stream replpb.Replication_ResyncServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil || start.BlockSize == 0 || start.BlockSize > 16<<20 {
		return status.Error(codes.InvalidArgument, "resync must start with ResyncStart")
	}
	r := &resyncer{b: b, start: start, kind: resyncscope.Full}
	if err := b.beginResync(r, b.askIssued(stream.Context(), start.Epoch)); err != nil {
		return err
	}
	r.rc = b.applier.Reconciler()
	b.log.Info("resync started", "seq", start.Seq, "epoch", start.Epoch, "scoped", start.Scoped)
	if start.Scoped {
		b.resyncMu.Lock()
		err := b.resyncCurrent(r.gen, start.Epoch)
		offer := r.offer()
		b.resyncMu.Unlock()
		if err != nil {
			return b.resyncFailed(err)
		}
		if err := stream.Send(&replpb.ResyncBackupMsg{Msg: &replpb.ResyncBackupMsg_Offer{Offer: offer}}); err != nil {
			return err
		}
		r.phase = phaseFirstScope
	} else {
		b.log.Info("resync: full", "seq", start.Seq, "why_not_targeted", "the primary did not offer a targeted one (its log says why)")
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		b.resyncMu.Lock()
		reply, done, err := r.step(msg)
		b.resyncMu.Unlock()
		if err != nil {
			return b.resyncFailed(err)
		}
		if reply != nil {
			if err := stream.Send(reply); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
	}
}

// resyncer is one resync's state on the backup.
type resyncer struct {
	b       *Backup
	start   *replpb.ResyncStart
	gen     uint64 // b.resyncs when it began
	rc      *apply.Reconciler
	pending *apply.Spec
	blocks  uint64
	// As it began: an earlier resync had not ended; the volume stalled.
	interrupted, wasStalled bool
	phase                   int    // of a scoped resync (resync_scope.go)
	kind                    string // resyncscope.Full or resyncscope.Targeted
	kept                    bool   // keepDiscarded ran
}

// keep runs keepDiscarded once per resync. base, if not 0, is where the
// two histories part (a scoped resync's): the batches up to it are in the
// new primary's history too, and are not kept aside.
func (r *resyncer) keep(base uint64) {
	if r.kept {
		return
	}
	r.kept = true
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	r.b.keepDiscarded(r.start, base)
}

// finish completes the file whose blocks were coming.
func (r *resyncer) finish() error {
	if r.pending == nil {
		return nil
	}
	err := r.rc.Finish(r.pending)
	r.pending = nil
	return err
}

// step handles one message, under resyncMu: what to reply, and whether the
// resync is done.
func (r *resyncer) step(msg *replpb.ResyncPrimaryMsg) (*replpb.ResyncBackupMsg, bool, error) {
	if err := r.b.resyncCurrent(r.gen, r.start.Epoch); err != nil {
		return nil, false, err
	}
	if sc := msg.GetScope(); sc != nil {
		reply, err := r.scopeStep(sc)
		return reply, false, err
	}
	if r.phase != phaseEntries {
		return nil, false, errors.New("resync entries before their scope")
	}
	switch {
	case msg.GetEntry() != nil:
		if err := r.finish(); err != nil {
			return nil, false, err
		}
		e := msg.GetEntry()
		spec := &apply.Spec{Path: string(e.Path), Mode: e.Mode, UID: e.Uid, GID: e.Gid, Size: e.Size, Target: string(e.Target),
			Rdev: e.Rdev, Xattrs: replpb.XattrMap(e.Xattrs), LinkTo: string(e.LinkTo), Mtime: e.MtimeNs, MatchAlloc: e.AllocMap}
		if e.AllocMap {
			spec.Alloc = theirAlloc(e.Alloc)
			if err := sparse.CheckMap(spec.Alloc); err != nil {
				return nil, false, fmt.Errorf("resync %q: %w", e.Path, err)
			}
		}
		compare, err := r.rc.Ensure(spec)
		if err != nil {
			return nil, false, err
		}
		r.pending = spec
		if spec.Mode&0o170000 != 0o100000 || spec.LinkTo != "" {
			return nil, false, nil
		}
		bs := r.start.BlockSize
		if err := theirSums(e, bs).Check(e.Size, int(bs)); err != nil {
			return nil, false, fmt.Errorf("resync %q: %w", e.Path, err)
		}
		var want []uint64
		if compare {
			want, err = r.rc.Compare(spec.Path, int(bs), theirSums(e, bs), r.rc.Fresh(spec.Path))
		}
		if err != nil {
			return nil, false, err
		}
		if len(want) > 0 && !r.rc.Fresh(spec.Path) {
			r.rc.Changed++
		}
		return &replpb.ResyncBackupMsg{Msg: &replpb.ResyncBackupMsg_Want{Want: &replpb.Want{Path: e.Path, Blocks: want}}}, false, nil
	case msg.GetBlock() != nil:
		bl := msg.GetBlock()
		if r.pending == nil || string(bl.Path) != r.pending.Path || len(bl.Data) > int(r.start.BlockSize) {
			return nil, false, errors.New("block for a file not being resynced")
		}
		if err := r.rc.WriteBlock(r.pending.Path, int64(bl.Index)*int64(r.start.BlockSize), bl.Data); err != nil {
			return nil, false, err
		}
		r.blocks++
		return nil, false, nil
	case msg.GetDone() != nil:
		if err := r.finish(); err != nil {
			return nil, false, err
		}
		if err := r.rc.Done(); err != nil {
			return nil, false, err
		}
		r.keep(0)
		if err := r.b.endResync(r.start); err != nil {
			return nil, false, err
		}
		r.b.log.Info("resync done", "kind", r.kind, "seq", r.start.Seq, "files_changed", r.rc.Changed, "blocks_received", r.blocks, "removed", r.rc.Removed)
		r.b.cfg.Events.Emit(events.KindResyncDone, "kind", r.kind, "seq", r.start.Seq, "files_changed", r.rc.Changed, "blocks_received", r.blocks)
		return &replpb.ResyncBackupMsg{Msg: &replpb.ResyncBackupMsg_Result{Result: &replpb.ResyncResult{
			FilesChanged: uint64(r.rc.Changed), BlocksReceived: r.blocks, Removed: uint64(r.rc.Removed)}}}, true, nil
	}
	return nil, false, errors.New("unexpected resync message")
}

// ErrResyncSuperseded ends a resync that is no longer current.
var ErrResyncSuperseded = errors.New("resync superseded")

// resyncCurrent says why the resync that began as gen, for a primary of
// epoch, must go no further (nil: it may); the caller holds resyncMu.
func (b *Backup) resyncCurrent(gen, epoch uint64) error {
	switch {
	case b.resyncs.Load() != gen:
		return fmt.Errorf("%w: a newer resync began", ErrResyncSuperseded)
	case b.fencedOut(epoch):
		return fmt.Errorf("%w: epoch %d ended (this backup was fenced at %d)", ErrResyncSuperseded, epoch, b.fenceFloor())
	case epoch < b.store.Epoch():
		return fmt.Errorf("%w: a primary of epoch %d connected", ErrResyncSuperseded, b.store.Epoch())
	}
	return nil
}

// beginResync checks a resync's start (word is the coordinator's on its
// epoch, epoch.go) and marks the backup stalled and resyncing; it notes in
// r the resync's generation (b.resyncs) and what the backup was as it
// began. It waits for a resync under way to finish the message it is
// handling, which then goes no further.
func (b *Backup) beginResync(r *resyncer, word issuedWord) error {
	start := r.start
	b.resyncMu.Lock()
	defer b.resyncMu.Unlock()
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
	if label, why := b.epochRefusal(start.Epoch, word); label != "" {
		b.m.rejected.WithLabelValues(label).Inc()
		b.flood("resync "+label, "refused a resync", "reason", why)
		return status.Error(codes.FailedPrecondition, why)
	}
	if b.fencingOut(start.Epoch) {
		b.m.rejected.WithLabelValues("fenced").Inc()
		return status.Errorf(codes.PermissionDenied, "epoch %d ended: this backup was fenced at epoch %d, and this primary was deposed", start.Epoch, b.fenceFloor())
	}
	if e := b.store.Epoch(); start.Epoch < e {
		b.m.rejected.WithLabelValues("stale_epoch").Inc()
		return status.Errorf(codes.PermissionDenied, "epoch %d is below %d: this primary was deposed", start.Epoch, e)
	}
	if b.active != nil {
		b.active.cancel()
		b.active = nil
	}
	interrupted, err := b.store.MetaUint(resyncingKey)
	if err != nil {
		return err
	}
	r.interrupted, r.wasStalled = interrupted > 0, b.stalled.Load()
	b.stalled.Store(true)    // stops the apply loop
	r.gen = b.resyncs.Add(1) // and drops its window
	b.decoded.reset()
	if err := b.store.SetMetaUints(map[string]uint64{journal.KeyStalled.Name: start.Seq + 1, resyncingKey: 1}); err != nil {
		return err
	}
	b.cfg.Events.Emit(events.KindResyncStarted, "seq", start.Seq, "epoch", start.Epoch)
	if !start.Scoped {
		// A scoped resync learns where the histories part first.
		r.kept = true
		b.keepDiscarded(start, 0)
	}
	return nil
}

// theirAlloc is an entry's allocation map; an extent out of any file's
// range comes out as one CheckMap refuses.
func theirAlloc(exts []*replpb.Extent) []sparse.AllocExtent {
	out := make([]sparse.AllocExtent, len(exts))
	for i, x := range exts {
		out[i] = sparse.AllocExtent{Off: -1, Unwritten: x.Unwritten}
		if x.Offset < 1<<62 && x.Length < 1<<62 {
			out[i].Off, out[i].End = int64(x.Offset), int64(x.Offset+x.Length)
		}
	}
	return out
}

// theirSums is what e says of its file's blocks.
func theirSums(e *replpb.Entry, blockSize uint32) apply.Sums {
	if !e.SparseSums {
		return apply.Sums{Blocks: uint64(len(e.BlockSums)), Sums: e.BlockSums}
	}
	return apply.Sums{Blocks: (e.Size + uint64(blockSize) - 1) / uint64(blockSize), Sparse: true, Index: e.SumBlocks, Sums: e.BlockSums}
}
