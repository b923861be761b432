package apply

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A resync block of 64 KiB holding 4 KiB of data allocates 4 KiB, and the
// file reads back exactly as sent: zeros where the block had them, over
// old data too.
func TestWriteSparseKeepsHoles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	old := bytes.Repeat([]byte{'o'}, 3*65536)
	if err := os.WriteFile(p, old, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 65536)
	copy(block[8192:], bytes.Repeat([]byte{'d'}, 4096))
	block[65535] = 'e' // a page of data at the very end, partly zero
	for _, off := range []int64{0, 65536, 16 << 20} {
		if err := writeSparse(f, off, block); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, block...), block...)
	want = append(want, old[2*65536:]...)
	if !bytes.Equal(got[:3*65536], want) || !bytes.Equal(got[16<<20:], block) {
		t.Fatal("the file does not read back as written")
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	// Three blocks of two data pages each, and the old third block
	// (16 pages): 22 pages of 4 KiB, in 512-byte units; written whole
	// the blocks took 16 pages each.
	if max := int64(22 * 8); st.Blocks > max+16 {
		t.Fatalf("%d 512-byte blocks allocated, want about %d", st.Blocks, max)
	}
}
