package capture

import (
	"encoding/binary"
	"fmt"
	"os"
	"path"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Handle is an open file or directory.
type Handle struct {
	id       uint64
	node     *Node
	fd       int
	append   bool
	mappable bool // opened for reading and writing: only such a file can be mapped shared and writable
	cleared  atomic.Bool

	// Cache is for the FUSE binding's own use (it keeps the serialized
	// directory listing there).
	Cache []byte
}

// ID returns the handle id.
func (h *Handle) ID() uint64 { return h.id }

// Cleared reports, once, that a write or open through the handle cleared
// setuid or setgid: the kernel's cached attributes of the file are stale.
func (h *Handle) Cleared() bool { return h.cleared.Load() && h.cleared.Swap(false) }

// Mappable reports whether the handle is a file opened for reading and
// writing: mmap(2) refuses a shared writable mapping of anything else
// (EACCES), so no other handle can leave dirty pages in the kernel.
func (h *Handle) Mappable() bool { return h.mappable }

// Node returns the node the handle is open on.
func (h *Handle) Node() *Node { return h.node }

// ReadDir lists an open directory from its start, "." and ".." included,
// as it is now: the listing is taken when a reader starts at offset 0
// (opendir, rewinddir), not at open, so a rewound listing shows what was
// created since.
func (f *FS) ReadDir(h *Handle) ([]Dirent, error) {
	if _, err := unix.Seek(h.fd, 0, unix.SEEK_SET); err != nil {
		return nil, f.fail("readdir", err)
	}
	ents, err := readDirents(h.fd, true)
	if err != nil {
		return nil, f.fail("readdir", err)
	}
	return ents, nil
}

// backingFlags turns open(2) flags from the kernel into flags for the
// backing file: O_DIRECT is stripped (the kernel already bypassed its
// cache; the backing file need not meet alignment rules), O_APPEND is
// emulated so the captured offset is where the data really lands, O_TRUNC
// is applied and recorded separately, and write-only opens read too so
// write diffing can compare old bytes.
func backingFlags(flags int) int {
	flags &^= unix.O_CREAT | unix.O_EXCL | unix.O_TRUNC | unix.O_APPEND | unix.O_DIRECT | unix.O_NOCTTY | unix.O_ASYNC
	if flags&unix.O_ACCMODE == unix.O_WRONLY {
		flags = flags&^unix.O_ACCMODE | unix.O_RDWR
	}
	return flags | unix.O_CLOEXEC | unix.O_NOFOLLOW
}

func (f *FS) newHandle(n *Node, fd int, flags int) *Handle {
	h := &Handle{id: f.nextH.Add(1), node: n, fd: fd, append: flags&unix.O_APPEND != 0,
		mappable: flags&unix.O_ACCMODE == unix.O_RDWR && n.typ != sIFDIR}
	f.handles.Store(h.id, h)
	f.table.addHandle(h)
	return h
}

// Handle returns the open handle with id, or nil.
func (f *FS) Handle(id uint64) *Handle {
	if v, ok := f.handles.Load(id); ok {
		return v.(*Handle)
	}
	return nil
}

// Open opens n with open(2) flags. kill, the opener, asks to clear
// setuid, setgid and capabilities along with O_TRUNC (see Write).
func (f *FS) Open(n *Node, flags int, kill *Caller) (*Handle, error) {
	if flags&unix.O_TRUNC != 0 {
		f.begin()
		defer f.end()
	}
	h, err := f.open(n, flags)
	if err == nil && kill != nil && flags&unix.O_TRUNC != 0 {
		n.mu.Lock()
		var changed bool
		changed, err = f.killPriv(n, h.fd, kill)
		n.mu.Unlock()
		if changed {
			h.cleared.Store(true)
		}
		if err != nil {
			f.Release(h)
			return nil, err
		}
	}
	return h, err
}

func (f *FS) open(n *Node, flags int) (*Handle, error) {
	if n.typ == sIFDIR {
		return f.openDir(n)
	}
	f.table.mu.RLock()
	p, err := f.nodePath(n)
	var fd int
	if err == nil {
		fd, err = unix.Openat(f.root, p, backingFlags(flags), 0)
		if err == unix.EACCES || err == unix.EPERM {
			fd, err = unix.Openat(f.root, p, flags&^(unix.O_CREAT|unix.O_EXCL|unix.O_TRUNC|unix.O_APPEND|unix.O_DIRECT)|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		}
	} else {
		fd, err = f.reopen(n, flags)
	}
	f.table.mu.RUnlock()
	if err != nil {
		return nil, f.fail("open", err)
	}
	h := f.newHandle(n, fd, flags)
	if flags&unix.O_TRUNC != 0 && flags&unix.O_ACCMODE != unix.O_RDONLY {
		n.mu.Lock()
		err := unix.Ftruncate(fd, 0)
		if err == nil && f.captures(n) {
			f.truncateLog(n, 0)
			f.mtimeAtSeal(n)
		}
		n.mu.Unlock()
		if err != nil {
			f.Release(h)
			return nil, f.fail("truncate", err)
		}
	}
	return h, nil
}

// reopen opens n, which has no name left, through a handle still open on
// it (open_by_handle_at of an unlinked file that is still open); ErrStale
// if none is. The caller holds table.mu shared.
func (f *FS) reopen(n *Node, flags int) (int, error) {
	old := f.table.anyFd(n)
	if old < 0 {
		return -1, ErrStale
	}
	fd, err := unix.Open(f.fdPath(old), backingFlags(flags)&^unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, err
	}
	// The handle may have been released meanwhile and its fd number
	// reused for another file.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Ino != n.ino || st.Mode&unix.S_IFMT != n.typ {
		unix.Close(fd)
		return -1, ErrStale
	}
	return fd, nil
}

func (f *FS) openDir(n *Node) (*Handle, error) {
	f.table.mu.RLock()
	p, err := f.nodePath(n)
	var fd int
	if err == nil {
		fd, err = unix.Openat(f.root, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	f.table.mu.RUnlock()
	if err != nil {
		return nil, f.fail("opendir", err)
	}
	return f.newHandle(n, fd, unix.O_RDONLY), nil
}

// readDirents reads a whole directory with getdents64, from the fd's
// current offset; "." and ".." only with dots.
func readDirents(fd int, dots bool) ([]Dirent, error) {
	var out []Dirent
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return nil, fmt.Errorf("getdents: bad record length %d", reclen)
			}
			name := b[19:reclen]
			if i := strings.IndexByte(string(name), 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); dots || s != "." && s != ".." {
				out = append(out, Dirent{Ino: binary.NativeEndian.Uint64(b[0:8]), Type: b[18], Name: s})
			}
			b = b[reclen:]
		}
	}
}

// Release closes a handle.
func (f *FS) Release(h *Handle) {
	f.handles.Delete(h.id)
	f.table.removeHandle(h)
	if h.fd >= 0 {
		unix.Close(h.fd)
	}
}

// Read reads from an open file at off into buf.
func (f *FS) Read(h *Handle, off int64, buf []byte) (int, error) {
	n, err := unix.Pread(h.fd, buf, off)
	if err != nil {
		return 0, f.fail("read", err)
	}
	return n, nil
}

// Fsync flushes an open file (fdatasync when datasync is set).
func (f *FS) Fsync(h *Handle, datasync bool) error {
	var err error
	if datasync {
		err = unix.Fdatasync(h.fd)
	} else {
		err = unix.Fsync(h.fd)
	}
	return f.fail("fsync", err)
}

// Readlink returns a symlink's target.
func (f *FS) Readlink(n *Node) (string, error) {
	f.table.mu.RLock()
	defer f.table.mu.RUnlock()
	p, err := f.nodePath(n)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 4096)
	k, err := unix.Readlinkat(f.root, p, buf)
	if err != nil {
		return "", f.fail("readlink", err)
	}
	return string(buf[:k]), nil
}

// Statfs reports the backing filesystem's usage.
func (f *FS) Statfs() (unix.Statfs_t, error) {
	var st unix.Statfs_t
	err := unix.Fstatfs(f.root, &st)
	return st, f.fail("statfs", err)
}

// Getattr returns a node's attributes; with h set, those of the open file.
func (f *FS) Getattr(n *Node, h *Handle) (Attr, error) {
	if h != nil && h.fd >= 0 {
		var st unix.Stat_t
		if err := unix.Fstat(h.fd, &st); err != nil {
			return Attr{}, f.fail("stat", err)
		}
		return attrFromStat(&st), nil
	}
	return f.stat(n)
}

// Forget drops count kernel references to n.
func (f *FS) Forget(n *Node, count uint64) { f.table.forget(n, count) }

// procPath names p through the backing root fd, for syscalls with no *at
// form (the xattr calls). It works while the mount hides the directory.
// The prefix makes the name longer than p: see entryName.
func (f *FS) procPath(p string) string {
	return fmt.Sprintf("/proc/self/fd/%d/%s", f.root, p)
}

// entryName names p for the l*xattr calls, as procPath does, and calls
// fn with the name. The prefix takes 16 or more bytes, so a path the
// volume accepts (up to 4095 bytes) may not fit the kernel's PATH_MAX
// with it: such a p is named through its parent directory, opened on its
// own (/proc/self/fd/N/base).
func (f *FS) entryName(p string, fn func(name string) error) error {
	name := f.procPath(p)
	if len(name) < unix.PathMax {
		return fn(name)
	}
	dir, base := path.Split(p)
	dfd, err := unix.Openat(f.root, strings.TrimSuffix(dir, "/"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return fn(fmt.Sprintf("/proc/self/fd/%d/%s", dfd, base))
}

var _ = os.ErrNotExist

// SeekData answers lseek(2)'s SEEK_DATA and SEEK_HOLE on an open file from
// its backing file, whose holes are the file's: every write reaches it as
// it is made. The one exception is a page stored through a shared
// writable mapping, dirty in the kernel and not yet written back; such a
// mapping needs a handle open for reading and writing, and lasts no
// longer than it (the kernel writes its pages back at munmap). While a
// handle like that is open on the file, the answer is the one the kernel
// gives a file system without lseek: all of the file is data.
func (f *FS) SeekData(h *Handle, off int64, whence int) (int64, error) {
	if whence != unix.SEEK_DATA && whence != unix.SEEK_HOLE {
		return 0, unix.EINVAL
	}
	if !f.table.mappable(h.node) {
		n, err := unix.Seek(h.fd, off, whence)
		return n, f.fail("lseek", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(h.fd, &st); err != nil {
		return 0, f.fail("lseek", err)
	}
	switch {
	case off < 0 || off >= st.Size: // ENXIO for a negative offset too, as ext4 and xfs answer
		return 0, unix.ENXIO
	case whence == unix.SEEK_DATA:
		return off, nil
	}
	return st.Size, nil
}
