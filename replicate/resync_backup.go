package replicate

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/sparse"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
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
	r := &resyncer{b: b, start: start, kind: kindFull}
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
	phase                   int    // of a scoped resync (resync_scope_backup.go)
	kind                    string // kindFull or kindTargeted
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
	if acked, _ := b.store.MetaUint(AckedKey); b.formerEpoch > 0 && acked > 0 {
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
	if err := b.store.SetMetaUint(AheadKey, 0); err != nil {
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
