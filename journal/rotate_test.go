package journal

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Segment rotation when the process has no descriptor left.

// TestRotationAfterEMFILE: a rotation that failed for want of a
// descriptor must not leave a file the next rotation trips on (it kept a
// primary's journal refusing every batch until restarted).
func TestRotationAfterEMFILE(t *testing.T) {
	dir := t.TempDir()
	sp := newSpare(dir, nil, nil)
	if err := os.WriteFile(sp.path(), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	sp.load()
	seg := filepath.Join(dir, segName(7))
	var lim, low unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low = lim
	low.Cur = 64
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var held []*os.File // every descriptor below the limit taken
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		held = append(held, f)
	}
	f, err := sp.take(seg)
	for _, h := range held {
		h.Close()
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if err == nil {
		f.Close()
		t.Fatal("take opened a file past the descriptor limit")
	}
	if _, err := os.Stat(seg); err == nil {
		t.Fatalf("a failed take left %s behind", seg)
	}
	if f, err = sp.take(seg); err != nil || f == nil {
		t.Fatalf("take after the shortage: %v, %v", f, err)
	}
	f.Close()

	// A leftover by the name of the segment to start is replaced.
	left := filepath.Join(dir, segName(8))
	if err := os.WriteFile(left, []byte("leftover"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err = createSegment(left)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, _ := f.Stat(); st.Size() != 0 {
		t.Fatalf("the leftover's %d bytes are still there", st.Size())
	}
}
