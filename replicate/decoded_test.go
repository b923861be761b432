package replicate

import (
	"testing"

	"github.com/pbfs/pbfs/journal"
)

// TestDecodedBatches: the apply loop takes what the stream stored, in
// order, older batches it skipped are dropped, the byte bound holds, and
// a journal that starts over drops what came before.
func TestDecodedBatches(t *testing.T) {
	var d decodedBatches
	batches := func(from, n uint64) ([]*journal.Batch, [][]byte) {
		var bs []*journal.Batch
		var encs [][]byte
		for seq := from; seq < from+n; seq++ {
			bs = append(bs, &journal.Batch{Seq: seq})
			encs = append(encs, make([]byte, 1<<20))
		}
		return bs, encs
	}
	d.put(batches(1, 4))
	if b, size := d.take(2); b == nil || b.Seq != 2 || size != 1<<20 {
		t.Fatalf("take 2: %v %d", b, size)
	}
	if b, _ := d.take(1); b != nil {
		t.Fatal("batch 1, older than one taken, still held")
	}
	d.put(batches(5, 10)) // 12 MiB after 2 MiB held: the oldest go
	if d.bytes > decodedMaxBytes {
		t.Fatalf("holds %d bytes", d.bytes)
	}
	if b, _ := d.take(6); b != nil {
		t.Fatal("batch 6 kept past the byte bound")
	}
	if b, _ := d.take(14); b == nil {
		t.Fatal("the newest batch was not kept")
	}
	d.put(batches(3, 1)) // a journal that started over
	if len(d.held) != 1 || d.bytes != 1<<20 {
		t.Fatalf("after a restart of the journal: %d held, %d bytes", len(d.held), d.bytes)
	}
	if b, _ := d.take(3); b == nil {
		t.Fatal("batch 3 of the new journal not held")
	}
}
