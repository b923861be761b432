package journal

import (
	"bytes"
	"testing"
)

// TestRecentBounds: the ring keeps the newest bodies within its slot and
// byte limits, never an oversized one, and starts over on a seq that does
// not follow.
func TestRecentBounds(t *testing.T) {
	var r recent
	body := func(seq uint64, n int) []byte { return bytes.Repeat([]byte{byte(seq)}, n) }
	for seq := uint64(1); seq <= recentSlots+10; seq++ {
		r.add(seq, body(seq, 100))
	}
	if r.get(10) != nil {
		t.Fatal("seq 10 still held past the slot limit")
	}
	for seq := uint64(11); seq <= recentSlots+10; seq++ {
		if got := r.get(seq); !bytes.Equal(got, body(seq, 100)) {
			t.Fatalf("seq %d: got %d bytes", seq, len(got))
		}
	}
	if r.bytes != recentSlots*100 {
		t.Fatalf("bytes %d, want %d", r.bytes, recentSlots*100)
	}
	// A small body in a large buffer counts as its buffer.
	wide := make([]byte, 10, recentBytes/8)
	r.add(recentSlots+11, wide)
	if r.bytes != (recentSlots-1)*100+recentBytes/8 {
		t.Fatalf("bytes %d after a 10-byte body in a %d-byte buffer", r.bytes, recentBytes/8)
	}
	r.reset()
	for seq := uint64(1); seq <= recentSlots+10; seq++ {
		r.add(seq, body(seq, 100))
	}

	big := recentBytes / 4
	next := uint64(recentSlots + 11)
	for i := 0; i < 5; i++ {
		r.add(next, body(next, big))
		next++
	}
	if r.bytes > recentBytes {
		t.Fatalf("holds %d bytes, over %d", r.bytes, recentBytes)
	}
	if r.get(next-1) == nil || r.get(next-5) != nil {
		t.Fatal("byte limit: want the newest kept and the oldest dropped")
	}
	r.add(next, body(next, big+1))
	if r.get(next) != nil {
		t.Fatal("an oversized body was kept")
	}
	r.add(next+5, body(next+5, 10))
	if r.get(next-1) != nil || r.get(next+5) == nil || r.bytes != 10 {
		t.Fatal("a seq that does not follow must start the ring over")
	}
}

// TestRecentServesAppends: what Get returns for batches just appended is
// what a reopened store reads from disk, and a rewrite of the log drops
// what the ring held.
func TestRecentServesAppends(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	encs := appendN(t, st, 20, 3000)
	if err := st.Reset(encs[20]); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(19); err == nil {
		t.Fatal("batch 19 still served after the reset")
	}
	st.Close()
	st, err = OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	enc, err := st.Get(20)
	if err != nil || !bytes.Equal(enc, encs[20]) {
		t.Fatalf("batch 20 after reopen: %v", err)
	}
}

// TestEncodeIsCompact: a batch that compresses far below its size comes
// out in a buffer near its size, since the journal keeps the newest in
// memory.
func TestEncodeIsCompact(t *testing.T) {
	enc, _, err := Encode(&Batch{Seq: 1, Ops: []Op{{Kind: KindWrite, Path: "f", Data: make([]byte, 4<<20)}}})
	if err != nil {
		t.Fatal(err)
	}
	if cap(enc) > 2*len(enc)+4096 {
		t.Fatalf("%d encoded bytes in a buffer of %d", len(enc), cap(enc))
	}
}
