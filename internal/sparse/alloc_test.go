package sparse_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/sparse"
)

// TestMatchCopiesAllocation: a file with data, zeros written, a hole,
// unwritten space inside its size and preallocation past it; a copy of
// its bytes laid out otherwise (all data, a longer preallocation) is
// made to match it: the same map, the same bytes.
func TestMatchCopiesAllocation(t *testing.T) {
	dir := fstest.SmallFS(t, 64<<20)
	const k = 4096
	src := create(t, filepath.Join(dir, "src"))
	write(t, src, 0, bytes.Repeat([]byte{'a'}, 4*k))
	write(t, src, 4*k, make([]byte, 4*k))             // zeros, written: data
	write(t, src, 12*k, bytes.Repeat([]byte{'b'}, k)) // [8k, 12k) stays a hole
	falloc(t, src, unix.FALLOC_FL_KEEP_SIZE, 16*k, 8*k)
	write(t, src, 24*k, bytes.Repeat([]byte{'c'}, k)) // [13k, 16k) a hole, [16k, 24k) unwritten
	falloc(t, src, unix.FALLOC_FL_KEEP_SIZE, 25*k, 32*k)
	const size = 25 * k
	want := mapOf(t, src, size)
	if len(sparse.PastEOF(want, size)) == 0 || len(want) < 4 {
		t.Fatalf("the source's map lacks what the test laid out: %+v", want)
	}

	dst := create(t, filepath.Join(dir, "dst"))
	content := readAll(t, src, size)
	write(t, dst, 0, content) // dense: every block data
	falloc(t, dst, unix.FALLOC_FL_KEEP_SIZE, size, 64*k)
	if err := sparse.Match(dst, size, want); err != nil {
		t.Fatal(err)
	}
	if got := mapOf(t, dst, size); !slices.Equal(got, want) {
		t.Fatalf("map after Match:\n got  %+v\n want %+v", got, want)
	}
	if !bytes.Equal(readAll(t, dst, size), content) {
		t.Fatal("Match changed the file's bytes")
	}
	// Again from a copy that is all hole: the data comes from its bytes,
	// which are the source's only where it has data.
	dst2 := create(t, filepath.Join(dir, "dst2"))
	if err := dst2.Truncate(size); err != nil {
		t.Fatal(err)
	}
	write(t, dst2, 0, content[:4*k])
	write(t, dst2, 12*k, content[12*k:13*k])
	write(t, dst2, 24*k, content[24*k:])
	if err := sparse.Match(dst2, size, want); err != nil {
		t.Fatal(err)
	}
	if got := mapOf(t, dst2, size); !slices.Equal(got, want) {
		t.Fatalf("map after Match of a sparse copy:\n got  %+v\n want %+v", got, want)
	}
}

func create(t *testing.T, p string) *os.File {
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func write(t *testing.T, f *os.File, off int64, b []byte) {
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func falloc(t *testing.T, f *os.File, mode uint32, off, n int64) {
	if err := unix.Fallocate(int(f.Fd()), mode, off, n); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, f *os.File, size int64) []byte {
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// mapOf is f's map once its data is written back (the kinds then no
// longer depend on the page cache).
func mapOf(t *testing.T, f *os.File, size int64) []sparse.AllocExtent {
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	m, err := sparse.Map(int(f.Fd()), size)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMapSeesThePageCache: pages of an unwritten extent that were only
// read stay unwritten in the map; pages written and not yet written back
// (FIEMAP still says unwritten) are data.
func TestMapSeesThePageCache(t *testing.T) {
	dir := fstest.SmallFS(t, 64<<20)
	const k = 4096
	f := create(t, filepath.Join(dir, "f"))
	falloc(t, f, 0, 0, 16*k)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	readAll(t, f, 16*k) // zero pages in the page cache
	write(t, f, 8*k, bytes.Repeat([]byte{'x'}, k))
	m, err := sparse.Map(int(f.Fd()), 16*k)
	if err != nil {
		t.Fatal(err)
	}
	want := []sparse.AllocExtent{{Off: 0, End: 8 * k, Unwritten: true}, {Off: 8 * k, End: 9 * k}, {Off: 9 * k, End: 16 * k, Unwritten: true}}
	if !slices.Equal(m, want) {
		t.Fatalf("map with pages cached and written:\n got  %+v\n want %+v", m, want)
	}
}

// TestCheckMapRefuses: a map from a primary that is out of order,
// overlapping, empty-ranged or past any file's offsets is refused before
// the backup allocates anything by it.
func TestCheckMapRefuses(t *testing.T) {
	for _, m := range [][]sparse.AllocExtent{
		{{Off: 8, End: 16}, {Off: 0, End: 4}},
		{{Off: 0, End: 16}, {Off: 8, End: 32}},
		{{Off: 4, End: 4}},
		{{Off: -1, End: 4}},
		{{Off: 0, End: 1<<62 + 1, Unwritten: true}},
	} {
		if err := sparse.CheckMap(m); !errors.Is(err, sparse.ErrBadMap) {
			t.Errorf("CheckMap(%+v) = %v, want ErrBadMap", m, err)
		}
	}
	if err := sparse.CheckMap([]sparse.AllocExtent{{Off: 0, End: 4}, {Off: 4, End: 8, Unwritten: true}}); err != nil {
		t.Errorf("a good map refused: %v", err)
	}
}
