package fstest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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
// FUSE mount over its backing directory, so its files are mapped through
// the descriptor of that directory its daemon holds
// (/proc/PID/fd/N/...): the test process holds none of its own, which the
// mount would report as a process holding files open beneath it.

// daemons maps a volume's path to the pid of the pbfs process a test
// started to serve it over itself.
var daemons sync.Map // string -> int

// noteDaemon remembers that pid serves vol, mounted over itself.
func noteDaemon(t testing.TB, vol string, pid int) {
	daemons.Store(vol, pid)
	t.Cleanup(func() { daemons.CompareAndDelete(vol, pid) })
}

// Beneath is where p, a path on a pbfs mount a test started, lies in the
// directory the mount covers (p itself otherwise): a write there changes
// the volume past the capture, as a process that held a file open before
// the mount would.
func Beneath(p string) string { return backingPath(p) }

// backingPath is where p, a path on a pbfs mount a test started, lies in
// the directory the mount covers; p itself otherwise.
func backingPath(p string) string {
	out := p
	daemons.Range(func(k, v any) bool {
		vol := k.(string)
		rel, ok := strings.CutPrefix(p, vol)
		if !ok || (rel != "" && rel[0] != '/') || !Mounted(vol) {
			return true
		}
		fds := fmt.Sprintf("/proc/%d/fd", v.(int))
		ents, _ := os.ReadDir(fds)
		for _, e := range ents {
			if target, err := os.Readlink(filepath.Join(fds, e.Name())); err == nil && target == vol {
				if fi, err := os.Stat(filepath.Join(fds, e.Name())); err == nil && fi.IsDir() {
					out = filepath.Join(fds, e.Name()) + rel
					break
				}
			}
		}
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

// sameAlloc reports whether two allocOf descriptions of files of size
// bytes agree, or cannot be compared (either unknown, or another file
// system). Past the size they must agree exactly. Inside it they may
// differ by single blocks here and there: replaying coalesced batches
// does not allocate the block a later truncate cuts a write down into
// (the write is dropped, the primary's block stays), nor do the kinds
// of space agree (file systems turn unwritten space written on their
// own). What resyncs lost, preallocation, unwritten ranges, runs of
// zeros turned holes, spans more.
func sameAlloc(a, b string, size int64) bool {
	fa, ra, _ := strings.Cut(a, ":")
	fb, rb, _ := strings.Cut(b, ":")
	if a == "" || b == "" || fa != fb || a == b {
		return true
	}
	var bsize int64
	if _, bs, ok := strings.Cut(fa, "/"); ok {
		fmt.Sscan(bs, &bsize)
	}
	ea, eb := parseAlloc(ra), parseAlloc(rb)
	eof := (size + 4095) / 4096 * 4096
	cuts := []int64{0, eof}
	for _, e := range append(append([]sparse.Extent{}, ea...), eb...) {
		cuts = append(cuts, e.Off, e.End)
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var run int64 // length of the difference running up to the current cut
	for i := 0; i+1 < len(cuts); i++ {
		x, y := cuts[i], cuts[i+1]
		if covers(ea, x) == covers(eb, x) {
			run = 0
			continue
		}
		if run += y - x; x >= eof || run > bsize {
			return false
		}
	}
	return true
}

// parseAlloc reads allocOf's ranges.
func parseAlloc(s string) []sparse.Extent {
	var out []sparse.Extent
	for _, r := range strings.Split(strings.TrimSuffix(s, ","), ",") {
		var e sparse.Extent
		if _, err := fmt.Sscanf(r, "%d-%d", &e.Off, &e.End); err == nil {
			out = append(out, e)
		}
	}
	return out
}

func covers(exts []sparse.Extent, off int64) bool {
	for _, e := range exts {
		if e.Off <= off && off < e.End {
			return true
		}
	}
	return false
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
