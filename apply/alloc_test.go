package apply_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/sparse"
)

// TestReconcileMatchesAllocation: a resync of a file whose backup copy
// is stale and dense gives it the primary's bytes and allocation: zeros
// written stay data, unwritten space stays unwritten, a hole a hole, and
// the preallocation past the end is kept, with only the differing blocks
// sent.
func TestReconcileMatchesAllocation(t *testing.T) {
	const block = 64 << 10
	disk := fstest.SmallFS(t, 64<<20)
	primary, target := filepath.Join(disk, "primary"), filepath.Join(disk, "backup")
	for _, d := range []string{primary, target} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.Create(filepath.Join(primary, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	const size = 6 * block
	writeAt(t, src, 0, make([]byte, block)) // zeros, written
	writeAt(t, src, block, bytes.Repeat([]byte{'a'}, block))
	if err := unix.Fallocate(int(src.Fd()), unix.FALLOC_FL_KEEP_SIZE, 2*block, 2*block); err != nil { // unwritten
		t.Fatal(err)
	}
	writeAt(t, src, 5*block, bytes.Repeat([]byte{'b'}, block)) // [4, 5) a hole
	if err := unix.Fallocate(int(src.Fd()), unix.FALLOC_FL_KEEP_SIZE, size, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := src.Sync(); err != nil {
		t.Fatal(err)
	}
	m, err := sparse.Map(int(src.Fd()), size)
	if err != nil {
		t.Fatal(err)
	}
	sums := apply.Sums{Blocks: size / block, Sparse: true}
	if _, err := sparse.ReadBlocks(src, size, block, func(off int64, b []byte) error {
		sums.Index, sums.Sums = append(sums.Index, uint64(off/block)), append(sums.Sums, apply.BlockSum(b))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "f"), bytes.Repeat([]byte{'c'}, 8*block), 0o644); err != nil {
		t.Fatal(err)
	}

	a, err := apply.New(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rc := a.Reconciler()
	spec := &apply.Spec{Path: "f", Mode: unix.S_IFREG | 0o644, Size: size, MatchAlloc: true, Alloc: m}
	if _, err := rc.Ensure(spec); err != nil {
		t.Fatal(err)
	}
	want, err := rc.Compare("f", block, sums, rc.Fresh("f"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(want, []uint64{0, 1, 5}) {
		t.Fatalf("blocks asked for: %v, want the three with data", want)
	}
	buf := make([]byte, block)
	for _, i := range want {
		n, _ := src.ReadAt(buf, int64(i)*block)
		if err := rc.WriteBlock("f", int64(i)*block, buf[:n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := rc.Finish(spec); err != nil {
		t.Fatal(err)
	}
	if err := rc.Done(); err != nil {
		t.Fatal(err)
	}
	dst, err := os.Open(filepath.Join(target, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	got, err := sparse.Map(int(dst.Fd()), size)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, m) {
		t.Fatalf("the backup's map:\n got  %+v\n want %+v", got, m)
	}
	pb, _ := os.ReadFile(filepath.Join(primary, "f"))
	if bb, _ := os.ReadFile(filepath.Join(target, "f")); !bytes.Equal(pb, bb) {
		t.Fatal("the backup's bytes differ from the primary's")
	}
}

func writeAt(t *testing.T, f *os.File, off int64, b []byte) {
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
