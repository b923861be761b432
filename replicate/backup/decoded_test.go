package backup

import (
	"testing"

	"github.com/pbfs/pbfs/journal"
)

// TestDecodedBatches: the apply loop takes what the stream stored, in
// order, older batches it skipped are dropped, the bounds on decoded bytes
// and on batches hold, and a journal that starts over drops what came
// before.
func TestDecodedBatches(t *testing.T) {
	var d decodedBatches
	batches := func(from, n uint64, data int) ([]*journal.Batch, [][]byte) {
		var bs []*journal.Batch
		var encs [][]byte
		for seq := from; seq < from+n; seq++ {
			bs = append(bs, &journal.Batch{Seq: seq, Ops: []journal.Op{{Kind: journal.KindWrite, Path: "f", Data: make([]byte, data)}}})
			encs = append(encs, make([]byte, 100)) // compresses well
		}
		return bs, encs
	}
	d.put(batches(1, 4, 1<<20))
	if b, size := d.take(2); b == nil || b.Seq != 2 || size != 100 {
		t.Fatalf("take 2: %v %d", b, size)
	}
	if b, _ := d.take(1); b != nil {
		t.Fatal("batch 1, older than one taken, still held")
	}
	d.put(batches(5, 40, 1<<20)) // 40 MiB decoded after 2 MiB held: the oldest go
	if d.bytes > decodedMaxBytes {
		t.Fatalf("holds %d decoded bytes, over %d", d.bytes, decodedMaxBytes)
	}
	if b, _ := d.take(6); b != nil {
		t.Fatal("batch 6 kept past the byte bound")
	}
	if b, _ := d.take(44); b == nil {
		t.Fatal("the newest batch was not kept")
	}
	d.put(batches(45, 3*decodedMaxBatches, 10))
	if len(d.held) > decodedMaxBatches {
		t.Fatalf("holds %d batches, over %d", len(d.held), decodedMaxBatches)
	}
	d.put(batches(3, 1, 10)) // a journal that started over
	if len(d.held) != 1 {
		t.Fatalf("after a restart of the journal: %d held", len(d.held))
	}
	if b, _ := d.take(3); b == nil {
		t.Fatal("batch 3 of the new journal not held")
	}
}
