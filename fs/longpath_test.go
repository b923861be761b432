package fs_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// TestPathLimitBoundary: a file whose path from the volume root is
// 4095 bytes (journal.MaxPath) is created, written, renamed and replayed;
// one byte more is refused with ENAMETOOLONG, whether created so or moved
// there with the directory above it while open. A symlink target of 4095
// bytes is kept whole. The move used to pass (the format allowed 4096
// bytes), and left an open file at a path that neither the primary's
// capture nor a backup's applier can pass to a syscall.
func TestPathLimitBoundary(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, nil)
		// 20 directories of 200 bytes and a 75-byte file name: 4095 bytes.
		dirs := make([]string, 20)
		for i := range dirs {
			dirs[i] = strings.Repeat(string(rune('a'+i)), 200)
		}
		deep := walk(t, e.Vol, dirs, true)
		defer unix.Close(deep)
		name := strings.Repeat("f", 75)
		if n := len(strings.Join(append(dirs, name), "/")); n != 4095 {
			t.Fatalf("test path is %d bytes", n)
		}
		fd, err := unix.Openat(deep, name, unix.O_CREAT|unix.O_RDWR, 0o644)
		must(t, err)
		defer unix.Close(fd)
		data := bytes.Repeat([]byte("deep"), 1000)
		_, err = unix.Pwrite(fd, data, 0)
		must(t, err)
		_, err = unix.Openat(deep, name+"g", unix.O_CREAT|unix.O_RDWR, 0o644)
		if !errors.Is(err, unix.ENAMETOOLONG) {
			t.Errorf("create at 4096 bytes: %v, want ENAMETOOLONG", err)
		}
		target := strings.Repeat("t", 4095)
		must(t, unix.Symlinkat(target, deep, "s"))
		// The file is open: moving its directory to a name one byte longer
		// would put it at 4096 bytes; one as long is fine.
		parent := walk(t, e.Vol, dirs[:19], false)
		defer unix.Close(parent)
		if err := unix.Renameat(parent, dirs[19], parent, dirs[19]+"x"); !errors.Is(err, unix.ENAMETOOLONG) {
			t.Errorf("move to a 4096-byte path: %v, want ENAMETOOLONG", err)
		}
		moved := strings.Repeat("y", 200)
		must(t, unix.Renameat(parent, dirs[19], parent, moved))
		_, err = unix.Pwrite(fd, []byte("DEEP"), 0)
		must(t, err)
		e.Barrier()
		e.ReplayInto(e.Start)
		dirs[19] = moved
		for _, root := range []string{e.Vol, e.Start} {
			d := walk(t, root, dirs, false)
			got := make([]byte, len(data)+1)
			rfd, err := unix.Openat(d, name, unix.O_RDONLY, 0)
			must(t, err)
			k, _ := unix.Pread(rfd, got, 0)
			unix.Close(rfd)
			if want := append([]byte("DEEP"), data[4:]...); !bytes.Equal(got[:k], want) {
				t.Errorf("%s: the 4095-byte path holds %d bytes, not what was written", root, k)
			}
			buf := make([]byte, 8192)
			if k, err := unix.Readlinkat(d, "s", buf); err != nil || string(buf[:k]) != target {
				t.Errorf("%s: symlink target of %d bytes (%v), want %d", root, k, err, len(target))
			}
			unix.Close(d)
		}
		// Remove the deep tree through the mount, then compare the rest.
		must(t, unix.Unlinkat(deep, name, 0))
		must(t, unix.Unlinkat(deep, "s", 0))
		for i := len(dirs) - 1; i >= 0; i-- {
			d := walk(t, e.Vol, dirs[:i], false)
			must(t, unix.Unlinkat(d, dirs[i], unix.AT_REMOVEDIR))
			unix.Close(d)
		}
		e.CheckReplay()
	})
}

// walk opens the directory dirs under root one step at a time, as a
// program reaches paths longer than PATH_MAX, making them with mk.
func walk(t *testing.T, root string, dirs []string, mk bool) int {
	t.Helper()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	for _, d := range dirs {
		if mk {
			if err := unix.Mkdirat(fd, d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				t.Fatal(err)
			}
		}
		next, err := unix.Openat(fd, d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		must(t, err)
		fd = next
	}
	return fd
}
