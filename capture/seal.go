package capture

import (
	"github.com/pbfs/pbfs/journal"
)

// Sealed is the content of one sealed batch, ready for the journal.
type Sealed struct {
	Ops     []journal.Op
	Written uint64 // bytes the service wrote during the batch
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
	ns, dirty, data, written := f.swapLocked()
	f.sealMu.Unlock()
	return f.finishSeal(ns, dirty, data, written)
}

// swapLocked takes the open batch out; the caller holds sealMu exclusively.
func (f *FS) swapLocked() (ns []journal.Op, dirty []*Node, data []journal.Op, written int64) {
	ns = f.ns
	f.ns = nil
	f.nsCount.Store(0)
	f.dirtyMu.Lock()
	dirty = f.dirty
	f.dirty = nil
	f.dirtyMu.Unlock()
	written = f.written.Swap(0)
	f.table.mapMu.Lock()
	for _, n := range dirty {
		log := n.log
		n.log = nil
		if p, ok := f.table.pathLocked(n); ok {
			data = append(data, log.Ops(n.id, p)...)
		}
	}
	f.table.mapMu.Unlock()
	f.pending.Store(0)
	return ns, dirty, data, written
}

// finishSeal wakes throttled writers and coalesces the swapped-out batch.
func (f *FS) finishSeal(ns []journal.Op, dirty []*Node, data []journal.Op, written int64) Sealed {
	f.flowMu.Lock()
	f.flowCond.Broadcast()
	f.flowMu.Unlock()
	f.table.sweep(dirty)
	ops := journal.PruneTemporaries(ns)
	return Sealed{Ops: append(ops, data...), Written: uint64(written)}
}
