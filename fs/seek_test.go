package fs_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// lseek(2)'s SEEK_DATA and SEEK_HOLE find a sparse file's holes through
// the mount (the kernel took the whole file for data before pbfs answered
// FUSE_LSEEK, so sparse-aware readers read every hole), and fall back to
// "all data" while a handle that could map the file writable is open.
func TestSeekDataAndHole(t *testing.T) {
	e := fstest.Setup(t, mount.Config{}, nil)
	p := filepath.Join(e.Vol, "sparse")
	const mib = 1 << 20
	f, err := os.Create(p)
	must(t, err)
	must(t, f.Truncate(64*mib))
	for _, off := range []int64{8 * mib, 40 * mib} {
		_, err := f.WriteAt([]byte("data"), off)
		must(t, err)
	}
	must(t, f.Close())

	seek := func(fd int, off int64, whence int) int64 {
		t.Helper()
		n, err := unix.Seek(fd, off, whence)
		if errors.Is(err, unix.ENXIO) {
			return -1
		}
		must(t, err)
		return n
	}
	r, err := os.Open(p)
	must(t, err)
	defer r.Close()
	fd := int(r.Fd())
	// ext4 keeps data in 4 KiB blocks: the data around 8 MiB and 40 MiB.
	if got := seek(fd, 0, unix.SEEK_DATA); got != 8*mib {
		t.Errorf("SEEK_DATA from 0: %d, want %d", got, 8*mib)
	}
	if got := seek(fd, 8*mib, unix.SEEK_HOLE); got <= 8*mib || got > 8*mib+64<<10 {
		t.Errorf("SEEK_HOLE from 8 MiB: %d", got)
	}
	if got := seek(fd, 9*mib, unix.SEEK_DATA); got != 40*mib {
		t.Errorf("SEEK_DATA from 9 MiB: %d, want %d", got, 40*mib)
	}
	if got := seek(fd, 41*mib, unix.SEEK_DATA); got != -1 {
		t.Errorf("SEEK_DATA past the last data: %d, want ENXIO", got)
	}
	if got := seek(fd, 41*mib, unix.SEEK_HOLE); got != 41*mib {
		t.Errorf("SEEK_HOLE in a hole: %d, want %d", got, 41*mib)
	}

	// A handle open for reading and writing may map the file and hold
	// dirty pages pbfs has not seen: the whole file counts as data.
	rw, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	if got := seek(fd, 0, unix.SEEK_DATA); got != 0 {
		t.Errorf("SEEK_DATA from 0 with a read-write handle open: %d, want 0", got)
	}
	if got := seek(fd, 0, unix.SEEK_HOLE); got != 64*mib {
		t.Errorf("SEEK_HOLE from 0 with a read-write handle open: %d, want %d", got, 64*mib)
	}
	if got := seek(fd, 64*mib, unix.SEEK_DATA); got != -1 {
		t.Errorf("SEEK_DATA at the end with a read-write handle open: %d, want ENXIO", got)
	}
	for _, whence := range []int{unix.SEEK_DATA, unix.SEEK_HOLE} {
		if _, err := unix.Seek(fd, -1, whence); !errors.Is(err, unix.ENXIO) {
			t.Errorf("whence %d from -1 with a read-write handle open: %v, want ENXIO as ext4 answers", whence, err)
		}
	}
	must(t, rw.Close())
	for _, whence := range []int{unix.SEEK_DATA, unix.SEEK_HOLE} {
		if _, err := unix.Seek(fd, -1, whence); !errors.Is(err, unix.ENXIO) {
			t.Errorf("whence %d from -1: %v, want ENXIO", whence, err)
		}
	}
	if got := seek(fd, 0, unix.SEEK_DATA); got != 8*mib {
		t.Errorf("SEEK_DATA from 0 after the read-write handle closed: %d, want %d", got, 8*mib)
	}
}
