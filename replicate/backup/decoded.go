package backup

import (
	"sync"

	"github.com/pbfs/pbfs/journal"
)

// decodedBatches hands the batches a backup's stream decoded while
// storing them to the apply loop, which would otherwise read each one
// back from the journal and decompress and parse it a second time. It
// holds at most decodedMaxBytes of them, decoded, in seq order; past that,
// or for a batch it no longer holds, the apply loop reads the journal as
// before. A stalled backup keeps none.
type decodedBatches struct {
	mu    sync.Mutex
	held  []decodedBatch // seq ascending
	bytes int64          // decoded bytes held
}

type decodedBatch struct {
	batch *journal.Batch
	size  int64 // encoded length
	mem   int64 // decoded bytes held
}

// decodedMaxBytes bounds the decoded bytes decodedBatches holds (a batch
// keeps its whole decompressed body), and decodedMaxBatches their number.
const (
	decodedMaxBytes   = 32 << 20
	decodedMaxBatches = 1024
)

// put keeps the batches just stored, with their encoded sizes. Batches the
// apply loop never took (it was stalled) are dropped, oldest first, to
// make room.
func (d *decodedBatches) put(batches []*journal.Batch, encs [][]byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, b := range batches {
		if n := len(d.held); n > 0 && b.Seq <= d.held[n-1].batch.Seq {
			d.held, d.bytes = nil, 0 // the journal started over
		}
		size, mem := int64(len(encs[i])), decodedMem(b)
		if mem > decodedMaxBytes/4 {
			continue
		}
		for len(d.held) > 0 && (d.bytes+mem > decodedMaxBytes || len(d.held) >= decodedMaxBatches) {
			d.pop()
		}
		d.held = append(d.held, decodedBatch{batch: b, size: size, mem: mem})
		d.bytes += mem
	}
}

// decodedMem is about what batch b keeps in memory: its data, and a
// little per op for the op and its paths.
func decodedMem(b *journal.Batch) int64 {
	return int64(b.DataBytes()) + 256*int64(len(b.Ops))
}

func (d *decodedBatches) pop() {
	d.bytes -= d.held[0].mem
	d.held[0] = decodedBatch{}
	d.held = d.held[1:]
}

// take returns batch seq and its encoded size, and forgets it and every
// older batch; nil if it is not held.
func (d *decodedBatches) take(seq uint64) (*journal.Batch, int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.held) > 0 && d.held[0].batch.Seq < seq {
		d.pop()
	}
	if len(d.held) == 0 || d.held[0].batch.Seq != seq {
		return nil, 0
	}
	e := d.held[0]
	d.pop()
	return e.batch, e.size
}

// reset forgets every batch (a resync replaced the journal).
func (d *decodedBatches) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held, d.bytes = nil, 0
}
