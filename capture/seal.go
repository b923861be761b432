package capture

import (
	"github.com/pbfs/pbfs/journal"
)

// Sealed is the content of one sealed batch, ready for the journal.
type Sealed struct {
	Ops     []journal.Op
	Written uint64 // bytes the service wrote during the batch
	logs    []*journal.DataLog
	fs      *FS
	payload int64 // the open batch's payload bytes when it was sealed
}

// Release hands the buffers Ops' data lives in back for reuse by later
// batches, and takes the batch off the FS's unjournaled bytes. Call it
// once Ops is stored and no longer used.
func (s *Sealed) Release() {
	for _, l := range s.logs {
		l.Release()
	}
	s.logs = nil
	if s.fs != nil {
		s.fs.sealed.Add(-s.payload)
		s.fs = nil
	}
}

// Empty reports whether the open batch holds no ops.
func (f *FS) Empty() bool {
	if f.nsCount.Load() > 0 {
		return false
	}
	f.dirtyMu.Lock()
	defer f.dirtyMu.Unlock()
	return len(f.dirty) == 0
}

// Seal closes the open batch and returns its ops, coalesced: namespace
// ops in capture order without files created and destroyed inside the
// batch, then each changed file's data and metadata ops under its path at
// the seal. Mutations wait only while the batch is swapped out.
func (f *FS) Seal() Sealed {
	f.sealMu.Lock()
	b := f.swapLocked()
	f.sealMu.Unlock()
	return f.finishSeal(b)
}

// swapped is the open batch as swapLocked took it out.
type swapped struct {
	ns, data []journal.Op
	dirty    []*Node
	logs     []*journal.DataLog
	written  int64
	payload  int64
}

// swapLocked takes the open batch out; the caller holds sealMu exclusively.
func (f *FS) swapLocked() (b swapped) {
	b.ns = f.ns
	f.ns = nil
	reread := f.reread
	f.reread = nil
	f.nsCount.Store(0)
	f.batch.Add(1)
	f.dirtyMu.Lock()
	b.dirty = f.dirty
	f.dirty = nil
	f.dirtyMu.Unlock()
	b.written = f.written.Swap(0)
	b.logs = make([]*journal.DataLog, 0, len(b.dirty))
	f.table.mapMu.Lock()
	for _, n := range b.dirty {
		log := n.log
		n.log = nil
		b.logs = append(b.logs, log)
		if p, ok := f.table.pathLocked(n); ok {
			if n.mtimeDirty {
				f.sealMtime(n, log, p)
			}
			b.data = append(b.data, log.Ops(n.id, p)...)
		}
		n.mtimeDirty = false
	}
	times, timed := f.rereadTimes(reread)
	b.data = append(b.data, times...)
	b.dirty = append(b.dirty, timed...) // swept with them
	f.table.mapMu.Unlock()
	// Counted as sealed before it leaves pending: Unjournaled may count it
	// twice for a moment, never miss it.
	b.payload = f.pending.Load()
	f.sealed.Add(b.payload)
	f.pending.Add(-b.payload)
	return b
}

// finishSeal wakes throttled writers and coalesces the swapped-out batch.
func (f *FS) finishSeal(b swapped) Sealed {
	f.flowMu.Lock()
	f.flowCond.Broadcast()
	f.flowMu.Unlock()
	f.table.sweep(b.dirty)
	ops := journal.PruneTemporaries(b.ns)
	return Sealed{Ops: append(ops, b.data...), Written: uint64(b.written), logs: b.logs, fs: f, payload: b.payload}
}
