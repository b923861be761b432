package journal

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

func sampleOps() []Op {
	return []Op{
		{Kind: KindCreate, Fid: 2, Path: "a", Mode: 0o644, UID: 1, GID: 2},
		{Kind: KindMknod, Fid: 3, Path: "dev", Mode: 0o10600, Rdev: 0x0103},
		{Kind: KindMkdir, Fid: 4, Path: "d", Mode: 0o755},
		{Kind: KindSymlink, Fid: 5, Path: "d/l", Target: "../a", UID: 7, GID: 8},
		{Kind: KindLink, Fid: 2, Path: "a", Path2: "d/a2"},
		{Kind: KindRename, Fid: 2, Path: "a", Path2: "b", Flags: RenameNoReplace},
		{Kind: KindUnlink, Fid: 9, Path: "gone"},
		{Kind: KindRmdir, Fid: 10, Path: "gonedir"},
		{Kind: KindWrite, Fid: 2, Path: "b", Offset: 1 << 40, Data: []byte("hello")},
		{Kind: KindTruncate, Fid: 2, Path: "b", Size: 12345},
		{Kind: KindChmod, Fid: 2, Path: "b", Mode: 0o4755},
		{Kind: KindChown, Fid: 2, Path: "b", UID: NoID, GID: 5},
		{Kind: KindUtimens, Fid: 2, Path: "b", Atime: OmitTime, Mtime: -1},
		{Kind: KindSetxattr, Fid: 2, Path: "b", Name: "user.x", Data: []byte{0, 1, 2}, Flags: 1},
		{Kind: KindRemovexattr, Fid: 2, Path: "b", Name: "user.y"},
		{Kind: KindFallocate, Fid: 2, Path: "b", Flags: 3, Offset: 4096, Size: 8192},
		{Kind: KindChmod, Fid: 1, Path: ".", Mode: 0o700},
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	b := &Batch{Epoch: 3, Seq: 77, Created: time.Unix(1700000000, 123), Prev: 0xdeadbeef, Written: 99, Ops: sampleOps()}
	enc, h, err := Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.Seq != 77 || h.Epoch != 3 || int(h.OpCount) != len(b.Ops) {
		t.Fatalf("header %+v", h)
	}
	got, err := Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Ops, b.Ops) || got.Seq != b.Seq || got.Epoch != b.Epoch || got.Prev != b.Prev || got.Written != 99 || !got.Created.Equal(b.Created) {
		t.Fatalf("round trip changed the batch:\n got %+v\nwant %+v", got, b)
	}
}

// TestEveryCorruptionIsDetected flips each byte and truncates at each
// length: Decode must fail every time, and never with a nil batch and a
// nil error.
// Both stored forms are flipped: a small batch's raw body and a large
// one's zstd frame.
func TestEveryCorruptionIsDetected(t *testing.T) {
	for _, ops := range [][]Op{sampleOps(), compressibleOps(MinCompress)} {
		enc, _, err := Encode(&Batch{Epoch: 1, Seq: 1, Ops: ops})
		if err != nil {
			t.Fatal(err)
		}
		for i := range enc {
			bad := bytes.Clone(enc)
			bad[i] ^= 0x40
			if _, err := Decode(bad); err == nil {
				t.Fatalf("%d-byte batch: flipping byte %d went unnoticed", len(enc), i)
			}
		}
		for n := 0; n < len(enc); n++ {
			if _, err := Decode(enc[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%d-byte batch truncated to %d bytes: %v, want ErrCorrupt", len(enc), n, err)
			}
		}
	}
}

// compressibleOps is one write of n bytes of repeated text.
func compressibleOps(n int) []Op {
	return []Op{{Kind: KindWrite, Fid: 2, Path: "log", Data: bytes.Repeat([]byte("pbfs "), n/5+1)[:n]}}
}

// TestBodyStoredAsItPays: a body below MinCompress is stored raw, a
// larger compressible one zstd-compressed, an incompressible one raw; each
// decodes to what was encoded, into memory of its own.
func TestBodyStoredAsItPays(t *testing.T) {
	random := make([]byte, 64<<10)
	rand.NewChaCha8([32]byte{2}).Read(random)
	for _, c := range []struct {
		name string
		ops  []Op
		zstd bool
	}{
		{"small", sampleOps(), false},
		{"compressible", compressibleOps(64 << 10), true},
		{"incompressible", []Op{{Kind: KindWrite, Fid: 2, Path: "r", Data: random}}, false},
	} {
		enc, h, err := Encode(&Batch{Epoch: 1, Seq: 1, Ops: c.ops})
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Flags&FlagZstd != 0; got != c.zstd {
			t.Errorf("%s: zstd %v, want %v (raw %d, stored %d)", c.name, got, c.zstd, h.RawLen, h.StoredLen)
		}
		if !c.zstd && h.StoredLen != h.RawLen {
			t.Errorf("%s: raw body stored as %d bytes, RawLen %d", c.name, h.StoredLen, h.RawLen)
		}
		got, err := Decode(enc)
		if err != nil || !reflect.DeepEqual(got.Ops, c.ops) {
			t.Fatalf("%s: round trip: %v", c.name, err)
		}
		clear(enc) // callers reuse the buffer a batch was read into
		if !reflect.DeepEqual(got.Ops, c.ops) {
			t.Fatalf("%s: the decoded ops changed with the buffer they were decoded from", c.name)
		}
	}
}

func TestUnknownVersionRefused(t *testing.T) {
	enc, _, _ := Encode(&Batch{Epoch: 1, Seq: 1, Ops: sampleOps()[:1]})
	enc[4] = 2 // version 2, checksum recomputed so only the version is wrong
	copy(enc[56:60], le32(checksum(enc)))
	if _, err := Decode(enc); !errors.Is(err, ErrVersion) {
		t.Fatalf("version 2: %v, want ErrVersion", err)
	}
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// TestHostileOpsRefused: ops that would escape the volume or break the
// limits are refused by the encoder and, crafted by hand, by the decoder.
func TestHostileOpsRefused(t *testing.T) {
	hostile := []Op{
		{Kind: KindWrite, Path: "../etc/passwd", Data: []byte("x")},
		{Kind: KindWrite, Path: "/etc/passwd"},
		{Kind: KindCreate, Path: "a/../../b"},
		{Kind: KindRename, Path: "a", Path2: "a/./b"},
		{Kind: KindLink, Path: "a", Path2: ""},
		{Kind: KindUnlink, Path: "."},
		{Kind: KindSetxattr, Path: "a", Name: ""},
		{Kind: KindSymlink, Path: "s", Target: ""},
		{Kind: KindRename, Path: "a", Path2: "b", Flags: 8},
		{Kind: KindTruncate, Path: "a", Size: 1 << 63},
		{Kind: 99, Path: "a"},
	}
	for _, op := range hostile {
		if _, _, err := Encode(&Batch{Ops: []Op{op}}); !errors.Is(err, ErrInvalidOp) {
			t.Errorf("Encode(%+v): %v, want ErrInvalidOp", op, err)
		}
		body := appendBody(nil, []Op{op})
		if _, err := parseBody(body, 1, true); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decode of %+v: %v, want ErrCorrupt", op, err)
		}
	}
}

// TestPathLimitBoundary: a path or symlink target of MaxPath (4095) bytes
// encodes and decodes; one of 4096, which no syscall takes (PATH_MAX
// counts the NUL), is refused by both, so no primary records an op that
// neither it nor a backup could apply.
func TestPathLimitBoundary(t *testing.T) {
	long := func(n int) string { // components of 200 bytes, exactly n bytes in all
		p := string(bytes.Repeat([]byte("d"), n%201))
		for len(p) < n {
			p = string(bytes.Repeat([]byte("c"), 200)) + "/" + p
		}
		return p
	}
	if len(long(4095)) != 4095 || len(long(4096)) != 4096 || !ValidPath(long(4095)) || ValidPath(long(4096)) {
		t.Fatalf("ValidPath: %d bytes %v, %d bytes %v; want 4095 valid, 4096 not",
			len(long(4095)), ValidPath(long(4095)), len(long(4096)), ValidPath(long(4096)))
	}
	target := string(bytes.Repeat([]byte("t"), MaxPath))
	ok := []Op{{Kind: KindCreate, Fid: 2, Path: long(4095), Mode: 0o644}, {Kind: KindSymlink, Fid: 3, Path: "s", Target: target}}
	enc, _, err := Encode(&Batch{Epoch: 1, Seq: 1, Ops: ok})
	if err != nil {
		t.Fatalf("encode at the limit: %v", err)
	}
	if b, err := Decode(enc); err != nil || b.Ops[0].Path != ok[0].Path || b.Ops[1].Target != target {
		t.Fatalf("decode at the limit: %v", err)
	}
	for _, op := range []Op{{Kind: KindCreate, Fid: 2, Path: long(4096), Mode: 0o644}, {Kind: KindSymlink, Fid: 3, Path: "s", Target: target + "t"}} {
		if _, _, err := Encode(&Batch{Ops: []Op{op}}); !errors.Is(err, ErrInvalidOp) {
			t.Errorf("encode of a %d-byte path or target: %v, want ErrInvalidOp", max(len(op.Path), len(op.Target)), err)
		}
		if _, err := parseBody(appendBody(nil, []Op{op}), 1, true); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decode of a %d-byte path or target: %v, want ErrCorrupt", max(len(op.Path), len(op.Target)), err)
		}
	}
}

func TestOversizedLengthsRefused(t *testing.T) {
	// A write claiming 1 GiB of data in a tiny body.
	body := []byte{byte(KindWrite), 1, 1, 'a', 0, 0x80, 0x80, 0x80, 0x80, 0x04}
	if _, err := parseBody(body, 1, true); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("oversized write: %v", err)
	}
	// An op count far beyond the body.
	if _, err := parseBody(appendBody(nil, sampleOps()[:1]), 1000, true); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("op count past the body: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	for i := 1; i <= len(sampleOps()); i++ {
		enc, _, _ := Encode(&Batch{Epoch: 1, Seq: uint64(i), Ops: sampleOps()[:i]})
		f.Add(enc)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Decode(data)
		if err != nil {
			if b != nil {
				t.Fatal("batch returned with an error")
			}
			return
		}
		for i := range b.Ops {
			if err := b.Ops[i].Check(); err != nil {
				t.Fatalf("decoded op %d fails Check: %v", i, err)
			}
		}
		enc, _, err := Encode(b)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		b2, err := Decode(enc)
		if err != nil || !reflect.DeepEqual(b.Ops, b2.Ops) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

// FuzzParseBody reaches the op decoder without having to forge checksums.
func FuzzParseBody(f *testing.F) {
	f.Add(appendBody(nil, sampleOps()), uint8(len(sampleOps())))
	f.Fuzz(func(t *testing.T, body []byte, count uint8) {
		ops, err := parseBody(body, int(count), true)
		if err != nil {
			return
		}
		again, err := parseBody(appendBody(nil, ops), len(ops), true)
		if err != nil || !reflect.DeepEqual(again, ops) {
			t.Fatalf("re-encoding does not decode to the same ops: %v", err)
		}
	})
}
