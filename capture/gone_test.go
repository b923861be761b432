package capture

import (
	"strconv"
	"testing"
)

// TestGoneRecordsAreBounded: the table remembers where the newest maxGone
// evicted nodes were, and a lookup of the same inode takes the old id
// back; older ones are dropped, and nodes evicted and looked up again over
// and over do not grow the eviction queue past its bound.
func TestGoneRecordsAreBounded(t *testing.T) {
	tb := newTable(1)
	ids := make([]uint64, maxGone+100)
	for i := range ids {
		n := tb.bind(tb.root, "f"+strconv.Itoa(i), uint64(100+i), sIFREG, 1)
		ids[i] = n.id
		tb.forget(n, 1)
	}
	if got := len(tb.gone.byID); got != maxGone {
		t.Fatalf("%d records after %d evictions, want %d", got, len(ids), maxGone)
	}
	last := len(ids) - 1
	if n := tb.bind(tb.root, "f"+strconv.Itoa(last), uint64(100+last), sIFREG, 1); n.id != ids[last] {
		t.Fatalf("the newest evicted inode came back as node %d, not its old id %d", n.id, ids[last])
	}
	if n := tb.bind(tb.root, "f0", 100, sIFREG, 1); n.id == ids[0] {
		t.Fatalf("the oldest evicted inode, past the bound, came back under its old id %d", n.id)
	}
	n := tb.bind(tb.root, "again", 1, sIFREG, 1)
	for range 3 * maxGone {
		tb.forget(n, 1)
		if m := tb.bind(tb.root, "again", 1, sIFREG, 1); m.id != n.id {
			t.Fatalf("a node evicted and looked up again got id %d, was %d", m.id, n.id)
		}
	}
	if got := len(tb.gone.queue); got > 2*maxGone {
		t.Fatalf("eviction queue holds %d entries, bound %d", got, 2*maxGone)
	}
}
