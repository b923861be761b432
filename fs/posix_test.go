package fs_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// names lists the entries getdents64 returns from fd's current offset.
func names(t *testing.T, fd int) []string {
	t.Helper()
	var out []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		must(t, err)
		if n == 0 {
			return out
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			out = append(out, strings.TrimRight(string(b[19:reclen]), "\x00"))
			b = b[reclen:]
		}
	}
}

// TestReaddirAsOnExt4: a listing has "." and ".." (pbfs left them out),
// and rewinddir on an open directory shows entries created since it was
// opened (pbfs kept the listing it took at open).
func TestReaddirAsOnExt4(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) {
			os.Mkdir(filepath.Join(vol, "d"), 0o755)
			os.WriteFile(filepath.Join(vol, "d", "old"), nil, 0o644)
		})
		fd, err := unix.Open(filepath.Join(e.Vol, "d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		must(t, err)
		defer unix.Close(fd)
		first := names(t, fd)
		slices.Sort(first)
		if !slices.Equal(first, []string{".", "..", "old"}) {
			t.Fatalf("listing %v, want [. .. old]", first)
		}
		must(t, os.WriteFile(filepath.Join(e.Vol, "d", "new"), nil, 0o644))
		must(t, os.Remove(filepath.Join(e.Vol, "d", "old")))
		_, err = unix.Seek(fd, 0, unix.SEEK_SET) // rewinddir
		must(t, err)
		again := names(t, fd)
		slices.Sort(again)
		if !slices.Equal(again, []string{".", "..", "new"}) {
			t.Fatalf("after rewinddir: %v, want [. .. new]", again)
		}
	})
}
