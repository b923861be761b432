package journal

import (
	"slices"
	"sort"
	"sync"
)

// maxExtent caps how far sequential writes grow one extent. An extent
// grows geometrically up to maxExtent; a sequential run then continues in
// fixed maxExtent buffers that are filled in place and reused from batch
// to batch, so appending never re-copies a large buffer under the file's
// lock: XDN's fuselog did that and ran 1 MiB sequential writes at 45 MiB/s,
// and our own 1 MiB cap made each SQLite WAL commit cost 11 µs more in
// copies, large allocations and page faults.
const maxExtent = 64 << 10

// runPool holds the buffers of sequential runs; DataLog.Release returns
// them once their batch is stored.
var runPool = sync.Pool{New: func() any { return new([maxExtent]byte) }}

type extent struct {
	off  uint64
	data []byte
}

func (e *extent) end() uint64 { return e.off + uint64(len(e.data)) }

// segment is a coalesced run of writes and truncates to one file.
//
// A truncate to a size at or below the file's frees every block past it,
// preallocated ones (fallocate with KEEP_SIZE) included; one that grows
// the file frees nothing. The coalesced form replays the truncate to the
// smallest size first, from the segment's starting size, and must free
// on a backup exactly what the primary freed. Only the segment's first
// truncate can depend on that starting size (the segment knows the size
// exactly after it), so the segment counts the others, and the first when
// its own writes had made the file at least that large, as certain
// shrinks: minShrink is the smallest. flush replays it as two truncates
// to that size, the second of which frees past it on any backup.
type segment struct {
	ext       []extent // sorted, non-overlapping (they may touch)
	truncated bool
	minTrunc  uint64 // smallest size any truncate set
	size      uint64 // size after the last op, when truncated
	known     uint64 // the least the file's size is, from this segment's ops
	shrunk    bool   // some truncate was a certain shrink
	minShrink uint64 // the smallest size a certain shrink set
}

// DataLog collects one file's data and metadata ops inside a batch and
// coalesces them as they arrive: overlapping writes merge into extents,
// truncates clip them, and only what changes the final state is kept.
// A DataLog is not safe for concurrent use; capture guards it with the
// file's lock.
type DataLog struct {
	done  []Op // flushed segments and fallocates, in order
	cur   segment
	meta  []Op
	bytes int
	runs  []*[maxExtent]byte // pooled buffers extents live in (Release)
	arena []byte             // the run small new extents are carved from
	alloc int                // bytes of buffers taken for the batch
}

// Bytes is the payload the log holds.
func (d *DataLog) Bytes() int { return d.bytes }

// Footprint is the memory the log has taken for this batch: buffers and
// metadata values, including those a truncate or an overwrite made dead
// (pooled buffers stay with the log until Release). It never shrinks, so
// a batch limit on it bounds memory where a limit on Bytes would not: a
// file rewritten and truncated over and over holds no payload but pins a
// run buffer per rewrite.
func (d *DataLog) Footprint() int { return d.alloc }

// Write records data written at off.
func (d *DataLog) Write(off uint64, data []byte) {
	for len(data) > maxExtent { // in pieces that each fit a run buffer
		d.Write(off, data[:maxExtent])
		off, data = off+maxExtent, data[maxExtent:]
	}
	if len(data) == 0 {
		return
	}
	s := &d.cur
	end := off + uint64(len(data))
	if s.truncated && end > s.size {
		s.size = end
	}
	s.known = max(s.known, end)
	n := len(s.ext)
	// The first extent the write can overlap or continue: usually the last.
	i := n
	if n > 0 && s.ext[n-1].end() >= off {
		i = n - 1
		if s.ext[i].off > off {
			i = sort.Search(n, func(i int) bool { return s.ext[i].end() >= off })
		}
	}
	if i == n { // past every extent
		s.ext = append(s.ext, extent{off: off, data: d.hold(data)})
		d.bytes += len(data)
		return
	}
	// Sequential: the write continues extent i and overlaps nothing after
	// it (one run, or several interleaved, or a log that wrapped around).
	if e := &s.ext[i]; e.end() == off && (i+1 == n || end <= s.ext[i+1].off) {
		d.extend(i, data)
		d.bytes += len(data)
		return
	}
	// First extent that starts after end.
	j := sort.Search(n, func(j int) bool { return s.ext[j].off > end })
	if j == i+1 && s.ext[i].off <= off && end <= s.ext[i].end() {
		copy(s.ext[i].data[off-s.ext[i].off:], data) // overwrite inside one extent
		return
	}
	if i == j { // no overlap, no contact: insert
		s.ext = slices.Insert(s.ext, i, extent{off: off, data: d.hold(data)})
		d.bytes += len(data)
		return
	}
	lo, hi := min(off, s.ext[i].off), max(end, s.ext[j-1].end())
	merged := make([]byte, hi-lo)
	d.alloc += len(merged)
	for k := i; k < j; k++ {
		copy(merged[s.ext[k].off-lo:], s.ext[k].data)
		d.bytes -= len(s.ext[k].data)
	}
	copy(merged[off-lo:], data)
	d.bytes += len(merged)
	s.ext[i] = extent{off: lo, data: merged}
	s.ext = append(s.ext[:i+1], s.ext[j:]...)
}

// extend appends data (at most maxExtent), written right after extent i,
// to it: in place while it fits, else in a buffer twice the size (a run
// buffer from maxExtent on), or, once the extent holds maxExtent, in a new
// extent that starts a run buffer.
func (d *DataLog) extend(i int, data []byte) {
	s := &d.cur
	e := &s.ext[i]
	switch size := len(e.data) + len(data); {
	case size <= cap(e.data):
		e.data = append(e.data, data...)
	case size <= maxExtent:
		e.data = append(append(d.buffer(min(2*size, maxExtent)), e.data...), data...)
	default:
		s.ext = slices.Insert(s.ext, i+1, extent{off: e.end(), data: append(d.run(), data...)})
	}
}

// hold copies data (at most maxExtent) for a new extent. Until the log
// holds maxExtent bytes each new extent gets a buffer of its own size;
// after that small ones are carved from a shared run (the arena), their
// capacity capped so that extending one moves it out. Buffers thus hold at
// most about twice the payload: a service that writes thousands of small
// files per batch must not pin a run buffer for each.
func (d *DataLog) hold(data []byte) []byte {
	if len(data) == maxExtent || d.bytes < maxExtent {
		return append(d.buffer(len(data)), data...)
	}
	if len(d.arena)+len(data) > cap(d.arena) {
		d.arena = d.run()
	}
	start := len(d.arena)
	d.arena = append(d.arena, data...)
	return d.arena[start:len(d.arena):len(d.arena)]
}

// buffer returns an empty buffer of capacity n (at most maxExtent): a run
// buffer when n is maxExtent.
func (d *DataLog) buffer(n int) []byte {
	if n >= maxExtent {
		return d.run()
	}
	d.alloc += n
	return make([]byte, 0, n)
}

// Truncate records a size change.
func (d *DataLog) Truncate(size uint64) {
	s := &d.cur
	if !s.truncated || size < s.minTrunc {
		s.minTrunc = size
	}
	if size <= s.known && (!s.shrunk || size < s.minShrink) {
		s.shrunk, s.minShrink = true, size
	}
	s.truncated, s.size, s.known = true, size, size
	k := len(s.ext)
	for k > 0 && s.ext[k-1].end() > size {
		e := &s.ext[k-1]
		if e.off >= size {
			d.bytes -= len(e.data)
			k--
			continue
		}
		d.bytes -= int(e.end() - size)
		e.data = e.data[:size-e.off]
		break
	}
	s.ext = s.ext[:k]
}

// Fallocate records an fallocate(2); it ends the current coalescing run.
func (d *DataLog) Fallocate(mode uint32, off, length uint64) {
	d.flush()
	d.done = append(d.done, Op{Kind: KindFallocate, Flags: mode, Offset: off, Size: length})
}

// Meta records a chmod, chown, utimens, setxattr or removexattr. A chmod
// or utimens directly after another of its kind merges into it.
func (d *DataLog) Meta(op Op) {
	if n := len(d.meta); n > 0 && d.meta[n-1].Kind == op.Kind && (op.Kind == KindChmod || op.Kind == KindUtimens) {
		prev := &d.meta[n-1]
		if op.Kind == KindUtimens {
			if op.Atime == OmitTime {
				op.Atime = prev.Atime
			}
			if op.Mtime == OmitTime {
				op.Mtime = prev.Mtime
			}
		}
		*prev = op
		return
	}
	d.bytes += len(op.Data)
	d.alloc += len(op.Data)
	d.meta = append(d.meta, op)
}

func (d *DataLog) flush() {
	s := &d.cur
	base := s.minTrunc // the size the truncates leave, before the writes
	if s.truncated {
		// The smallest truncate is either a certain shrink, or the first
		// and as uncertain on the backup as it was on the primary.
		d.done = append(d.done, Op{Kind: KindTruncate, Size: s.minTrunc})
		if s.shrunk {
			// The second truncate to a size is never a grow: it frees past
			// it whatever the backup's size was.
			base = s.minShrink
			if base != s.minTrunc {
				d.done = append(d.done, Op{Kind: KindTruncate, Size: base})
			}
			d.done = append(d.done, Op{Kind: KindTruncate, Size: base})
		}
	}
	var top uint64
	for _, e := range s.ext {
		d.done = append(d.done, Op{Kind: KindWrite, Offset: e.off, Data: e.data})
		top = e.end()
	}
	if s.truncated && max(top, base) != s.size {
		d.done = append(d.done, Op{Kind: KindTruncate, Size: s.size})
	}
	d.cur = segment{}
}

// Ops returns the coalesced ops for the file, addressed by fid and path:
// data ops first, then metadata ops, each in the order they took effect.
// The log must not be used afterwards.
func (d *DataLog) Ops(fid uint64, path string) []Op {
	d.flush()
	out := append(d.done, d.meta...)
	for i := range out {
		out[i].Fid, out[i].Path = fid, path
	}
	return out
}

// run returns an empty pooled buffer of capacity maxExtent that the log
// owns until Release.
func (d *DataLog) run() []byte {
	r := runPool.Get().(*[maxExtent]byte)
	d.runs = append(d.runs, r)
	d.alloc += maxExtent
	return r[:0]
}

// Release returns the log's buffers for reuse. The ops Ops returned share
// them: call it only once those ops are no longer used (encoded and stored).
func (d *DataLog) Release() {
	for i, r := range d.runs {
		runPool.Put(r)
		d.runs[i] = nil
	}
	d.runs, d.arena = d.runs[:0], nil
}
