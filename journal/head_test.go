package journal

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// unwritten returns the bytes of f's extents that are allocated but not
// written (fallocated), by FIEMAP. It skips the test where the file system
// cannot say.
func unwritten(t *testing.T, path string) int64 {
	t.Helper()
	const (
		fsIocFiemap     = 0xC020660B
		flagSync        = 0x1
		extentUnwritten = 0x800
		extentLast      = 0x1
		extents         = 64
	)
	type extent struct {
		Logical, Physical, Length uint64
		_                         [2]uint64
		Flags                     uint32
		_                         [3]uint32
	}
	type fiemap struct {
		Start, Length                   uint64
		Flags, Mapped, Count, _reserved uint32
		Extents                         [extents]extent
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for start := uint64(0); ; {
		m := fiemap{Start: start, Length: ^uint64(0) - start, Flags: flagSync, Count: extents}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&m)))
		if e != 0 {
			if errors.Is(e, syscall.EOPNOTSUPP) || errors.Is(e, syscall.ENOTTY) {
				t.Skipf("FIEMAP on %s: %v", path, e)
			}
			t.Fatalf("FIEMAP on %s: %v", path, e)
		}
		if m.Mapped == 0 {
			return n
		}
		for _, x := range m.Extents[:m.Mapped] {
			if x.Flags&extentUnwritten != 0 {
				n += int64(x.Length)
			}
			if x.Flags&extentLast != 0 {
				return n
			}
			start = x.Logical + x.Length
		}
	}
}

// smallHead makes begin zero-fill size bytes for one test.
func smallHead(t *testing.T, size int64) {
	t.Helper()
	old := headSize
	headSize = size
	t.Cleanup(func() { headSize = old })
}

// TestAppendsLandOnWrittenBlocks: a new log, and the newest segment of a
// reopened one, take their appends in blocks written before, never in
// blocks only fallocated, whose conversion costs every fdatasync two more
// device writes: a zero-filled head, then the spare, made meanwhile.
func TestAppendsLandOnWrittenBlocks(t *testing.T) {
	smallSegments(t, 1<<20)
	smallHead(t, 128<<10)
	dir := t.TempDir()
	st := reopen(t, nil, dir, StoreOptions{})
	want := appendN(t, st, 1, 3000)
	segs := segmentFiles(t, dir)
	if len(segs) != 1 {
		t.Fatalf("%d segments after one batch", len(segs))
	}
	if n := unwritten(t, segs[0]); n != 0 {
		t.Fatalf("a new log's first segment has %d bytes only fallocated", n)
	}
	if st, err := os.Stat(segs[0]); err != nil || st.Size() != 128<<10 {
		t.Fatalf("first segment: %v, %v; want the 128 KiB head", st.Size(), err)
	}
	// The head ends the segment; the spare is made meanwhile.
	spare := filepath.Join(dir, batchDir, spareFile)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(spare); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("no spare made after a new log's first append")
		}
	}
	for seq, enc := range appendN(t, st, 60, 3000) { // 180 KB: past the head
		want[seq] = enc
	}
	segs = segmentFiles(t, dir)
	if len(segs) != 2 {
		t.Fatalf("%d segments after 180 KB past a 128 KiB head", len(segs))
	}
	sort.Strings(segs)
	for _, s := range segs {
		if n := unwritten(t, s); n != 0 {
			t.Fatalf("segment %s has %d bytes only fallocated", filepath.Base(s), n)
		}
	}
	checkJournal(t, st, want)

	// Reopened, the newest segment gets a head past its last record.
	st = reopen(t, st, dir, StoreOptions{})
	fi, err := os.Stat(segs[1])
	if err != nil {
		t.Fatal(err)
	}
	if n := unwritten(t, segs[1]); n != 0 {
		t.Fatalf("the reopened newest segment has %d bytes only fallocated", n)
	}
	for seq, enc := range appendN(t, st, 20, 3000) {
		want[seq] = enc
	}
	if n := unwritten(t, segs[1]); n != 0 {
		t.Fatalf("after appends, the reopened newest segment has %d bytes only fallocated", n)
	}
	if fi.Size() > 1<<20 {
		t.Fatalf("the reopened segment grew to %d bytes, past the segment size", fi.Size())
	}
	checkJournal(t, st, want)
	st = reopen(t, st, dir, StoreOptions{})
	checkJournal(t, st, want)
}
