package fs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// TestShrinkingTruncatesReplayAllocation: a truncate to a size at or below
// the file's frees the blocks past it, preallocated ones included, and a
// replay frees the same although a batch coalesces a file's truncates
// into one. Coalesced to its smallest size, "grow to 900k, cut to 360k"
// was a grow on the copy and kept a megabyte the primary had freed
// (fsstress found it; the trees compared allocation and differed).
func TestShrinkingTruncatesReplayAllocation(t *testing.T) {
	const k = 1024
	data := bytes.Repeat([]byte("pbfs"), 300*k/4)
	prealloc := func(t *testing.T, f *os.File) {
		t.Helper()
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		must(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, 1024*k))
	}
	cases := []struct {
		name string
		ops  func(t *testing.T, f *os.File)
	}{
		{"grow then cut", func(t *testing.T, f *os.File) {
			must(t, f.Truncate(900*k))
			must(t, f.Truncate(360*k))
		}},
		{"write past then cut", func(t *testing.T, f *os.File) {
			_, err := f.WriteAt([]byte("x"), 800*k)
			must(t, err)
			must(t, f.Truncate(360*k))
		}},
		{"grow, cut, grow", func(t *testing.T, f *os.File) {
			must(t, f.Truncate(500*k))
			_, err := f.WriteAt([]byte("y"), 700*k)
			must(t, err)
			must(t, f.Truncate(600*k))
			must(t, f.Truncate(2048*k))
		}},
		{"cut to the same size", func(t *testing.T, f *os.File) {
			must(t, f.Truncate(300*k))
		}},
	}
	for _, between := range []bool{false, true} {
		// One batch holds everything, or the preallocation is an earlier
		// batch's and the truncates coalesce on their own.
		e := fstest.Setup(t, mount.Config{SealInterval: time.Hour}, nil)
		for _, c := range cases {
			f, err := os.Create(filepath.Join(e.Vol, c.name))
			must(t, err)
			prealloc(t, f)
			if between {
				e.Barrier()
			}
			c.ops(t, f)
			must(t, f.Close())
		}
		e.CheckReplay()
	}
}
