package replicate

import (
	"sync"

	"github.com/pbfs/pbfs/journal"
)

// decodedBatches hands the batches a backup's stream decoded while
// storing them to the apply loop, which would otherwise read each one
// back from the journal and decompress and parse it a second time. It
// holds at most decodedMaxBytes of encoded batches, in seq order; past
// that, or for a batch it no longer holds, the apply loop reads the
// journal as before.
type decodedBatches struct {
	mu    sync.Mutex
	held  []decodedBatch // seq ascending
	bytes int64
}

type decodedBatch struct {
	batch *journal.Batch
	size  int64 // encoded length
}

// decodedMaxBytes bounds what decodedBatches holds, by encoded size (what
// it holds decoded is up to a few times that for compressible data).
const decodedMaxBytes = 8 << 20

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
		size := int64(len(encs[i]))
		if size > decodedMaxBytes/4 {
			continue
		}
		for d.bytes+size > decodedMaxBytes && len(d.held) > 0 {
			d.pop()
		}
		d.held = append(d.held, decodedBatch{batch: b, size: size})
		d.bytes += size
	}
}

func (d *decodedBatches) pop() {
	d.bytes -= d.held[0].size
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
