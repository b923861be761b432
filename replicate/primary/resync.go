package primary

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/capture"
	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/sparse"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/resyncscope"
)

// resyncBlock is the block size resyncs compare and send.
const resyncBlock = 64 << 10

// Snapshotter gives a primary a consistent view of its volume to resync
// from: capture's Committer.Snapshot and FS.OpenHandle.
type Snapshotter interface {
	Snapshot(ctx context.Context) (journal.Header, []capture.Entry, time.Duration, error)
	OpenHandle(h *unix.FileHandle) (*os.File, error)
}

// resync brings the backup's volume and journal to a snapshot of the
// primary's. Mutations pause only while the snapshot lists the tree; file
// data is read afterwards through file handles, as it is by then, which the
// batches after the snapshot (replayed by the backup as usual) correct: data
// ops are idempotent, and the tree the batches apply to is the snapshot's.
func (s *Shipper) resync(ctx context.Context, forced bool) error {
	err := s.resyncOnce(ctx, forced)
	if status.Code(err) == codes.PermissionDenied { // a backup's answer to a stale epoch (../backup/resync.go)
		s.setDeposed()
		s.log.Error("this primary is deposed: a backup refused its resync for a higher epoch", "err", err)
		return fmt.Errorf("%v: %w", err, ErrDeposed)
	}
	return err
}

func (s *Shipper) resyncOnce(ctx context.Context, forced bool) error {
	if s.snaps == nil {
		return fmt.Errorf("resync: not available: %w", ErrNeedsResync)
	}
	started := time.Now()
	hdr, entries, pause, err := s.snaps.Snapshot(ctx)
	if err != nil {
		return err
	}
	s.m.resyncPause.Observe(pause.Seconds())
	var anchor []byte
	if hdr.Seq > 0 {
		if anchor, err = s.store.Get(hdr.Seq); err != nil {
			return fmt.Errorf("resync: anchor batch: %w", err)
		}
	}
	total := fileBytes(entries, nil)
	s.log.Info("resync: snapshot taken", "seq", hdr.Seq, "entries", len(entries), "bytes", total, "pause", pause.Round(time.Microsecond))
	stream, err := replpb.NewReplicationClient(s.conn).Resync(ctx)
	if err != nil {
		return err
	}
	refused := s.scopeRefused(forced)
	if err := stream.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Start{Start: &replpb.ResyncStart{
		VolumeId: s.volumeID, Epoch: s.store.Epoch(), Seq: hdr.Seq, Anchor: anchor, BlockSize: resyncBlock, Scoped: refused == "",
	}}}); err != nil {
		return err
	}
	s.resyncProg.begin(uint64(total))
	s.resyncing.Store(true)
	defer func() { s.resyncing.Store(false); s.resyncProg.started.Store(0) }()
	plan := fullPlan(refused)
	if refused == "" {
		if plan, err = s.negotiate(stream, hdr, entries, total); err != nil {
			return err
		}
	}
	if plan.kind == resyncscope.Targeted {
		total = fileBytes(entries, plan.send)
		s.resyncProg.total.Store(uint64(total))
		s.log.Info("resync: targeted: only the paths the two histories touched since they parted", "seq", hdr.Seq,
			"entries", plan.n, "of", len(entries), "subtrees", plan.subtrees, "bytes", total)
	} else {
		s.log.Info("resync: full", "seq", hdr.Seq, "why_not_targeted", plan.why)
	}
	s.ev.Emit(events.KindResyncStarted, "backup", s.addr, "kind", plan.kind, "seq", hdr.Seq, "bytes", total)
	listed, sent, err := s.sendEntries(stream, entries, plan)
	if err != nil {
		return err
	}
	if err := stream.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Done{Done: &replpb.ResyncDone{}}}); err != nil {
		return err
	}
	msg, err := stream.Recv()
	if err != nil {
		return err
	}
	res := msg.GetResult()
	if res == nil {
		return errors.New("resync: no result from the backup")
	}
	s.setStale(false)
	s.resyncProg.finish() // before the count, which pbfs resync --wait watches
	s.resyncsDone.Add(1)
	s.m.resyncs.WithLabelValues(plan.kind).Inc()
	s.m.resyncEntries.WithLabelValues(plan.kind).Add(float64(listed))
	s.m.resyncBlocks.WithLabelValues(plan.kind).Add(float64(sent))
	if f := s.onResync; f != nil {
		s.onResync = nil
		f()
	}
	s.ev.Emit(events.KindResyncDone, "backup", s.addr, "kind", plan.kind, "seq", hdr.Seq, "files_differed", res.FilesChanged,
		"bytes_sent", s.resyncProg.sent.Load(), "took", time.Since(started).Round(time.Millisecond).String())
	s.log.Info("resync done", "kind", plan.kind, "seq", hdr.Seq, "entries_sent", listed, "of", len(entries), "files_differed", res.FilesChanged, "blocks_sent", sent,
		"removed", res.Removed, "pause", pause.Round(time.Microsecond), "took", time.Since(started).Round(time.Millisecond))
	return nil
}

// sendEntries sends the snapshot's entries the plan picks, each file's
// blocks the backup lacks, logging progress every 5 s; it returns how many
// entries it listed and how many blocks it sent.
func (s *Shipper) sendEntries(stream replpb.Replication_ResyncClient, entries []capture.Entry, plan *resyncPlan) (int, uint64, error) {
	var done, sent uint64
	lastLog := time.Now()
	listed, toSend := 0, len(entries)
	if plan.kind == resyncscope.Targeted {
		toSend = plan.n
	}
	for i := range entries {
		if !plan.sends(i) || entries[i].Path == "." && !s.rootEntry.Load() {
			continue // out of scope; or the root, which a backup from before root entries refuses
		}
		listed++
		n, err := s.resyncEntry(stream, &entries[i], done)
		if err != nil {
			return listed, sent, fmt.Errorf("resync %q: %w", entries[i].Path, err)
		}
		sent += n
		if entries[i].Stat.Mode&unix.S_IFMT == unix.S_IFREG && entries[i].LinkTo == "" {
			done += uint64(entries[i].Stat.Size) // counted as total was
			s.resyncProg.advance(done)
		}
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			s.log.Info("resync progress", "entries", fmt.Sprintf("%d/%d", listed, toSend), "progress", s.resyncProg.snapshot().String())
		}
	}
	return listed, sent, nil
}

// fileBytes sums the sizes of the regular files among entries (those
// send picks, if set).
func fileBytes(entries []capture.Entry, send []bool) uint64 {
	var total uint64
	for i := range entries {
		if send == nil || send[i] {
			if entries[i].Stat.Mode&unix.S_IFMT == unix.S_IFREG && entries[i].LinkTo == "" {
				total += uint64(entries[i].Stat.Size)
			}
		}
	}
	return total
}

// resyncEntry sends one entry and, for a regular file, the blocks the
// backup asks for. It returns the number of blocks sent.
func (s *Shipper) resyncEntry(stream replpb.Replication_ResyncClient, e *capture.Entry, before uint64) (uint64, error) {
	st := &e.Stat
	msg := &replpb.Entry{Path: []byte(e.Path), Mode: st.Mode, Uid: st.Uid, Gid: st.Gid, Size: uint64(st.Size),
		Target: []byte(e.Target), Rdev: st.Rdev, Xattrs: replpb.Xattrs(e.Xattrs), MtimeNs: st.Mtim.Nano()}
	if e.LinkTo != "" {
		msg.LinkTo = []byte(e.LinkTo)
	}
	regular := st.Mode&unix.S_IFMT == unix.S_IFREG && e.LinkTo == ""
	var f *os.File
	if regular {
		var err error
		// Deleted since the snapshot: the batches after it delete it on
		// the backup too, so its content does not matter.
		if f, err = s.snaps.OpenHandle(e.Handle); err == nil {
			defer f.Close()
			index, sums, err := dataSums(f, st.Size, func(off int64) { s.resyncProg.advance(before + uint64(off)) })
			if err != nil {
				return 0, err
			}
			if s.allocMap.Load() {
				if msg.Alloc, err = allocMap(f, st.Size); err != nil {
					return 0, err
				}
				msg.AllocMap = msg.Alloc != nil
			}
			if s.sparseSums.Load() {
				msg.SparseSums, msg.SumBlocks, msg.BlockSums = true, index, sums
			} else {
				msg.BlockSums = denseSums(index, sums, st.Size)
			}
		}
	}
	if err := stream.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Entry{Entry: msg}}); err != nil {
		return 0, err
	}
	if !regular {
		return 0, nil
	}
	reply, err := stream.Recv()
	if err != nil {
		return 0, err
	}
	want := reply.GetWant()
	if want == nil || string(want.Path) != e.Path {
		return 0, errors.New("backup did not answer with its wanted blocks")
	}
	buf := make([]byte, resyncBlock)
	for _, idx := range want.Blocks {
		if f == nil || !offered(msg, idx) {
			return 0, fmt.Errorf("backup wants block %d it was not offered", idx)
		}
		n, err := f.ReadAt(buf, int64(idx)*resyncBlock)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if err := stream.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Block{Block: &replpb.BlockData{
			Path: msg.Path, Index: idx, Data: buf[:n]}}}); err != nil {
			return 0, err
		}
		s.resyncProg.sent.Add(uint64(n))
	}
	return uint64(len(want.Blocks)), nil
}

// dataSums checksums the blocks of the first size bytes of f that hold
// data, and lists their indices; holes are not read. It stops early if f
// was cut meanwhile.
func dataSums(f *os.File, size int64, read func(off int64)) ([]uint64, [][]byte, error) {
	index, sums := []uint64{}, [][]byte{}
	_, err := sparse.ReadBlocks(f, size, resyncBlock, func(off int64, b []byte) error {
		index, sums = append(index, uint64(off/resyncBlock)), append(sums, apply.BlockSum(b))
		read(off + int64(len(b)))
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return index, sums, nil
}

// allocMap is where f holds space, for a backup to give its copy the
// same; nil where the file system does not say (no FIEMAP: the backup
// then goes by the sums alone).
func allocMap(f *os.File, size int64) ([]*replpb.Extent, error) {
	m, err := sparse.Map(int(f.Fd()), size)
	if errors.Is(err, sparse.ErrNoMap) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	out := make([]*replpb.Extent, len(m))
	for i, e := range m {
		out[i] = &replpb.Extent{Offset: uint64(e.Off), Length: uint64(e.End - e.Off), Unwritten: e.Unwritten}
	}
	return out, nil
}

// denseSums lists a sum for every block of a file of size bytes, HoleSum
// for a hole, for a backup from before sparse sums.
func denseSums(index []uint64, sums [][]byte, size int64) [][]byte {
	out := make([][]byte, (size+resyncBlock-1)/resyncBlock)
	for i := range out {
		out[i] = apply.HoleSum
	}
	for i, idx := range index {
		out[idx] = sums[i]
	}
	return out
}

// offered reports whether msg offered block idx (a block with data).
func offered(msg *replpb.Entry, idx uint64) bool {
	if !msg.SparseSums {
		return idx < uint64(len(msg.BlockSums)) && !apply.IsHole(msg.BlockSums[idx])
	}
	i, ok := slices.BinarySearch(msg.SumBlocks, idx)
	return ok && i < len(msg.BlockSums)
}
