package journal

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// model is a file in memory: the reference the coalesced ops must match.
// prealloc is where the blocks preallocated at the start (fallocate with
// KEEP_SIZE, far past the data) now end: a truncate to a size at or below
// the file's frees every block past it, as ext4, xfs and btrfs do.
type model struct {
	data     []byte
	prealloc uint64
}

// startPrealloc is where a model's preallocation ends at the start.
const startPrealloc = 1 << 30

func (m *model) write(off uint64, p []byte) {
	if end := off + uint64(len(p)); end > uint64(len(m.data)) {
		m.data = append(m.data, make([]byte, end-uint64(len(m.data)))...)
	}
	copy(m.data[off:], p)
}

func (m *model) truncate(n uint64) {
	if n <= uint64(len(m.data)) {
		m.prealloc = min(m.prealloc, n)
	}
	if n < uint64(len(m.data)) {
		m.data = m.data[:n]
	} else {
		m.data = append(m.data, make([]byte, n-uint64(len(m.data)))...)
	}
}

func (m *model) apply(ops []Op) {
	for _, op := range ops {
		switch op.Kind {
		case KindWrite:
			m.write(op.Offset, op.Data)
		case KindTruncate:
			m.truncate(op.Size)
		}
	}
}

// checkCoalesce runs a random sequence of writes and truncates through a
// DataLog and through the model, and compares replaying the coalesced ops
// onto the same starting content with the model's result.
func checkCoalesce(t *testing.T, r *rand.Rand, steps int) {
	// Small files exercise overlaps; large ones runs past maxExtent, in
	// several places at once.
	span, size := 6000, 3000
	if r.IntN(4) == 0 {
		span, size = 4*maxExtent, maxExtent/3
	}
	start := bytes.Repeat([]byte{'s'}, r.IntN(span))
	want := &model{data: bytes.Clone(start), prealloc: startPrealloc}
	var d DataLog
	defer d.Release()
	var prevEnd uint64
	for i := 0; i < steps; i++ {
		switch r.IntN(10) {
		case 0, 1:
			n := uint64(r.IntN(span))
			want.truncate(n)
			d.Truncate(n)
		default:
			off := uint64(r.IntN(span))
			switch r.IntN(4) {
			case 0: // append
				off = uint64(len(want.data))
			case 1: // continue the previous write, wherever it was
				off = prevEnd
			}
			p := make([]byte, 1+r.IntN(size))
			if r.IntN(20) == 0 {
				p = make([]byte, maxExtent+r.IntN(maxExtent))
			}
			prevEnd = off + uint64(len(p))
			for j := range p {
				p[j] = byte(r.Uint32())
			}
			want.write(off, p)
			d.Write(off, p)
		}
	}
	got := &model{data: bytes.Clone(start), prealloc: startPrealloc}
	ops := d.Ops(1, "f")
	got.apply(ops)
	if !bytes.Equal(got.data, want.data) {
		t.Fatalf("coalesced replay differs: got %d bytes, want %d (ops %d)", len(got.data), len(want.data), len(ops))
	}
	if got.prealloc != want.prealloc {
		t.Fatalf("coalesced replay keeps preallocation to %d, the file's ops to %d (start %d, ops %v)", got.prealloc, want.prealloc, len(start), opsShape(ops))
	}
	payload := 0
	for _, op := range ops {
		payload += len(op.Data)
	}
	if payload != d.Bytes() || payload > len(want.data)+len(start) {
		t.Fatalf("payload %d, Bytes() %d, file %d", payload, d.Bytes(), len(want.data))
	}
}

func TestDataLogMatchesModel(t *testing.T) {
	for seed := uint64(0); seed < 2000; seed++ {
		checkCoalesce(t, rand.New(rand.NewPCG(seed, 1)), 1+int(seed%40))
	}
}

func TestSequentialWritesDoNotRecopy(t *testing.T) {
	for _, size := range []int{24, 4096, 4120, 128 << 10} {
		var d DataLog
		want := make([]byte, 8<<20)
		rand.NewChaCha8([32]byte{byte(size)}).Read(want)
		for off := 0; off < len(want); off += size {
			d.Write(uint64(off), want[off:min(off+size, len(want))])
		}
		// Each extent is filled in place, maxExtent at a time (larger
		// writes are split).
		var got []byte
		ops := d.Ops(1, "f")
		perExtent := maxExtent
		if size <= maxExtent {
			perExtent = maxExtent / size * size
		}
		if limit := (len(want)+perExtent-1)/perExtent + 1; len(ops) > limit {
			t.Errorf("size %d: %d ops for 8 MiB of sequential writes, want at most %d", size, len(ops), limit)
		}
		for _, op := range ops {
			if op.Offset != uint64(len(got)) {
				t.Fatalf("size %d: op at %d after %d bytes", size, op.Offset, len(got))
			}
			got = append(got, op.Data...)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("size %d: coalesced data differs", size)
		}
		d.Release()
	}
}

func TestBuffersStayNearPayload(t *testing.T) {
	// What a batch's logs allocate must stay within a small factor of what
	// they hold, or MaxBatchBytes (which counts payload) bounds nothing: a
	// run buffer per small file would pin 64 KiB for every 200 bytes.
	r := rand.New(rand.NewPCG(3, 3))
	patterns := map[string]func(d *DataLog){
		"one small write":  func(d *DataLog) { d.Write(0, make([]byte, 100)) },
		"two small writes": func(d *DataLog) { d.Write(0, make([]byte, 100)); d.Write(100, make([]byte, 100)) },
		"ten small writes": func(d *DataLog) {
			for i := 0; i < 10; i++ {
				d.Write(uint64(i*100), make([]byte, 100))
			}
		},
		"wal stream": func(d *DataLog) {
			for i := 0; i < 2000; i++ {
				d.Write(uint64(32+i*4120), make([]byte, 24))
				d.Write(uint64(56+i*4120), make([]byte, 4096))
			}
		},
		"random 4k": func(d *DataLog) {
			for i := 0; i < 1000; i++ {
				d.Write(uint64(r.IntN(16384))*4096, make([]byte, 4096))
			}
		},
		"sequential 128k": func(d *DataLog) {
			for i := 0; i < 64; i++ {
				d.Write(uint64(i<<17), make([]byte, 128<<10))
			}
		},
	}
	for name, write := range patterns {
		var d DataLog
		write(&d)
		if d.alloc > 4*d.Bytes() {
			t.Errorf("%s: %d bytes of buffers for %d bytes of payload", name, d.alloc, d.Bytes())
		}
		d.Release()
	}
}

func TestFootprintCountsDeadBuffers(t *testing.T) {
	// A file rewritten and truncated to nothing again and again holds no
	// payload but pins a run buffer per rewrite until Release: the batch
	// limit must see that memory (capture seals on Footprint), or a
	// journal that refuses appends lets it grow without bound.
	var d DataLog
	defer d.Release()
	page := make([]byte, 4096)
	for i := 0; i < 100; i++ {
		for off := 0; off < 128<<10; off += len(page) {
			d.Write(uint64(off), page)
		}
		d.Truncate(0)
	}
	if d.Bytes() != 0 {
		t.Fatalf("payload %d after truncating to 0", d.Bytes())
	}
	if held := len(d.runs) * maxExtent; d.Footprint() < held {
		t.Fatalf("footprint %d bytes while %d bytes of run buffers are held", d.Footprint(), held)
	}
}

func TestReleasedRunsAreReusedSafely(t *testing.T) {
	// Two logs alive at once never share a buffer, and a released log's
	// buffers serve the next one.
	a, b := &DataLog{}, &DataLog{}
	pa, pb := bytes.Repeat([]byte{'a'}, 4096), bytes.Repeat([]byte{'b'}, 4096)
	for i := 0; i < 40; i++ {
		a.Write(uint64(i*4096), pa)
		b.Write(uint64(i*4096), pb)
	}
	for _, op := range a.Ops(1, "a") {
		if bytes.ContainsRune(op.Data, 'b') {
			t.Fatal("log a holds log b's bytes")
		}
	}
	a.Release()
	c := &DataLog{}
	for i := 0; i < 40; i++ {
		c.Write(uint64(i*4096), bytes.Repeat([]byte{'c'}, 4096))
	}
	for _, op := range b.Ops(2, "b") {
		if bytes.ContainsAny(op.Data, "ac") {
			t.Fatal("log b's bytes changed after another log reused released buffers")
		}
	}
	allocs := testing.AllocsPerRun(20, func() {
		var d DataLog
		for i := 0; i < 16; i++ {
			d.Write(uint64(i*4096), pa)
		}
		d.Ops(1, "f")
		d.Release()
	})
	if allocs > 8 { // 6 here (the run buffer is reused); growing one extent by append took 10

		t.Errorf("%.0f allocations to log 64 KiB sequentially with reuse", allocs)
	}
}

func TestMetaMergesUtimens(t *testing.T) {
	var d DataLog
	d.Meta(Op{Kind: KindUtimens, Atime: 10, Mtime: OmitTime})
	d.Meta(Op{Kind: KindUtimens, Atime: OmitTime, Mtime: 20})
	ops := d.Ops(1, "f")
	if len(ops) != 1 || ops[0].Atime != 10 || ops[0].Mtime != 20 {
		t.Fatalf("merged utimens %+v", ops)
	}
}

func FuzzDataLog(f *testing.F) {
	f.Add(uint64(1), uint8(20))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint8) {
		checkCoalesce(t, rand.New(rand.NewPCG(seed, 2)), int(steps))
	})
}

func TestPruneTemporaries(t *testing.T) {
	ns := []Op{
		{Kind: KindMkdir, Fid: 10, Path: "tmpd", Parent: 1},
		{Kind: KindCreate, Fid: 11, Path: "tmpd/x", Parent: 10},
		{Kind: KindCreate, Fid: 12, Path: "keep", Parent: 1},
		{Kind: KindUnlink, Fid: 11, Path: "tmpd/x", Parent: 10},
		{Kind: KindRmdir, Fid: 10, Path: "tmpd", Parent: 1},
		{Kind: KindUnlink, Fid: 20, Path: "pre", Parent: 1}, // pre-existing: kept
		{Kind: KindCreate, Fid: 21, Path: "pre", Parent: 1}, // re-created: kept
		{Kind: KindCreate, Fid: 22, Path: "t2", Parent: 1},  // destroyed by a rename onto it
		{Kind: KindCreate, Fid: 23, Path: "t3", Parent: 1},  // renamed, then unlinked: kept
		{Kind: KindRename, Fid: 12, Path: "keep", Path2: "t2", Parent: 1, Parent2: 1, Fid2: 22},
		{Kind: KindRename, Fid: 23, Path: "t3", Path2: "t4", Parent: 1, Parent2: 1},
		{Kind: KindUnlink, Fid: 23, Path: "t4", Parent: 1},
	}
	got := PruneTemporaries(ns)
	var kept []string
	for _, op := range got {
		kept = append(kept, op.Kind.String()+" "+op.Path)
	}
	want := []string{"create keep", "unlink pre", "create pre", "create t3", "rename keep", "rename t3", "unlink t4"}
	if len(kept) != len(want) {
		t.Fatalf("kept %q, want %q", kept, want)
	}
	for i := range want {
		if kept[i] != want[i] {
			t.Fatalf("kept %q, want %q", kept, want)
		}
	}
}

// opsShape describes ops for a failure message: kinds, offsets, sizes.
func opsShape(ops []Op) []string {
	var out []string
	for _, op := range ops {
		out = append(out, fmt.Sprintf("%s@%d+%d/%d", op.Kind, op.Offset, len(op.Data), op.Size))
	}
	return out
}
