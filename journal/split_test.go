package journal

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestSplitKeepsBatchesWithinLimits: a seal far larger than one batch may
// be (long paths, many tiny extents) is cut into runs that each encode and
// store, in order, and the group round-trips with FlagMore on all but the
// last batch.
func TestSplitKeepsBatchesWithinLimits(t *testing.T) {
	long := strings.Repeat("d/", 1500) + "f" // a 3001-byte path
	var ops []Op
	for i := 0; i < 40000; i++ {
		ops = append(ops, Op{Kind: KindWrite, Fid: 9, Path: long, Offset: uint64(2 * i), Data: []byte{byte(i)}})
	}
	ops = append(ops, Op{Kind: KindWrite, Fid: 9, Path: "big", Data: bytes.Repeat([]byte("x"), 1<<20)})
	chunks := Split(ops)
	if len(chunks) < 2 {
		t.Fatalf("%d chunks for %d ops of %d-byte paths, want several", len(chunks), len(ops), len(long))
	}
	var back []Op
	dir := t.TempDir()
	st, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i, c := range chunks {
		enc, h, err := Encode(&Batch{Seq: uint64(i + 1), More: i < len(chunks)-1, Ops: c})
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if len(enc) > ChunkBytes+HeaderSize || h.OpCount > ChunkOps {
			t.Fatalf("chunk %d: %d bytes, %d ops", i, len(enc), h.OpCount)
		}
		if _, _, err := st.Append(c, time.Now(), 0, i < len(chunks)-1); err != nil {
			t.Fatalf("store chunk %d: %v", i, err)
		}
		b, err := Decode(enc)
		if err != nil {
			t.Fatal(err)
		}
		if b.More != (i < len(chunks)-1) {
			t.Fatalf("chunk %d of %d: More=%v", i, len(chunks), b.More)
		}
		back = append(back, b.Ops...)
	}
	if len(back) != len(ops) || back[len(back)-1].Path != "big" || back[12345].Offset != 2*12345 {
		t.Fatalf("the group does not give back the ops in order: %d ops", len(back))
	}
}

// TestUnknownFlagStillRefused: FlagMore is known; any other new flag bit
// is still a format this build cannot read.
func TestUnknownFlagStillRefused(t *testing.T) {
	enc, _, err := Encode(&Batch{Seq: 1, More: true, Ops: []Op{{Kind: KindMkdir, Path: "d"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(enc); err != nil {
		t.Fatalf("FlagMore: %v", err)
	}
	enc[6] |= 1 << 2
	enc[56], enc[57], enc[58], enc[59] = 0, 0, 0, 0
	h, _ := DecodeHeader(enc)
	h.Checksum = checksum(enc)
	putHeader(enc[:HeaderSize], &h)
	if _, err := Decode(enc); err == nil || !strings.Contains(err.Error(), "unknown flags") {
		t.Fatalf("flag bit 2: %v, want unknown flags", err)
	}
}
