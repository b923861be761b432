package fstest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/sparse"
)

// Trees compare allocation too: where each regular file holds space
// (data or unwritten, inside its size and preallocated past it) and
// where it has holes, from FIEMAP (internal/sparse). Only files on the
// same kind of file system with the same block size are compared so, and
// only where both could be mapped: another file system allocates
// otherwise, and tmpfs and FUSE have no FIEMAP. A primary's volume is a
// FUSE mount over its backing directory, so the tests remember that
// directory before pbfs mounts over it (noteBacking) and map the
// primary's files there.

// backings maps a volume's path to a descriptor of the directory a pbfs
// mount covers there.
var backings sync.Map // string -> *os.File

// noteBacking remembers the directory at vol before a pbfs mount covers
// it (the first time only: a later mount covers the same directory).
func noteBacking(t testing.TB, vol string) {
	if _, ok := backings.Load(vol); ok || Mounted(vol) {
		return
	}
	d, err := os.OpenFile(vol, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return // a mount the test never compares
	}
	if _, loaded := backings.LoadOrStore(vol, d); loaded {
		d.Close()
		return
	}
	t.Cleanup(func() {
		backings.Delete(vol)
		d.Close()
	})
}

// backingPath is where p, a path on a pbfs mount a test started, lies in
// the directory the mount covers; p itself otherwise.
func backingPath(p string) string {
	out := p
	backings.Range(func(k, v any) bool {
		vol := k.(string)
		rel, ok := strings.CutPrefix(p, vol)
		if !ok || (rel != "" && rel[0] != '/') || !Mounted(vol) {
			return true
		}
		out = fmt.Sprintf("/proc/self/fd/%d%s", v.(*os.File).Fd(), rel)
		return false
	})
	return out
}

// allocOf describes where the regular file p, of size bytes, holds space:
// its file system's type and block size, then the allocated ranges
// (data and unwritten space alike: file systems decide for themselves
// when to turn unwritten space written). "" where it cannot be mapped.
func allocOf(p string, size int64) string {
	f, err := os.OpenFile(backingPath(p), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	var fs unix.Statfs_t
	if unix.Fstatfs(int(f.Fd()), &fs) != nil {
		return ""
	}
	m, err := sparse.Map(int(f.Fd()), size)
	if err != nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%x/%d:", fs.Type, fs.Bsize)
	for _, e := range sparse.Allocated(m) {
		if fs.Type == unix.XFS_SUPER_MAGIC {
			// XFS preallocates past the end of a growing file on its own.
			if e.Off >= size {
				break
			}
			e.End = min(e.End, (size+fs.Bsize-1)/fs.Bsize*fs.Bsize)
		}
		fmt.Fprintf(&b, "%d-%d,", e.Off, e.End)
	}
	return b.String()
}

// sameAlloc reports whether two allocOf descriptions agree, or cannot be
// compared (either unknown, or another file system).
func sameAlloc(a, b string) bool {
	fa, _, _ := strings.Cut(a, ":")
	fb, _, _ := strings.Cut(b, ":")
	return a == "" || b == "" || fa != fb || a == b
}

// copyFile copies src's bytes and allocation to a new file dst, as a
// resync does: holes stay holes, unwritten space and preallocation past
// the size stay what they are, where the file systems can map them.
func copyFile(src, dst string, size int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := out.Truncate(size); err != nil {
		return err
	}
	exts, err := sparse.DataExtents(int(in.Fd()), size)
	if err != nil {
		return err
	}
	for _, e := range exts {
		if _, err := io.Copy(io.NewOffsetWriter(out, e.Off), io.NewSectionReader(in, e.Off, e.End-e.Off)); err != nil {
			return err
		}
	}
	m, err := sparse.Map(int(in.Fd()), size)
	if errors.Is(err, sparse.ErrNoMap) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := sparse.Match(out, size, m); err != nil {
		return fmt.Errorf("copy %s: %w", filepath.Base(src), err)
	}
	return nil
}
