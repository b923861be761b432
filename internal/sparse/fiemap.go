package sparse

import (
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FIEMAP (linux/fiemap.h): the file system's own list of a file's
// extents, holes left out, with flags that tell data from space
// allocated but never written (fallocate), past the size too.

const (
	fsIocFiemap        = 0xC020660B // _IOWR('f', 11, struct fiemap)
	fiemapExtentLast   = 0x1
	fiemapExtentUnwrit = 0x800
	fiemapBatch        = 256 // extents asked for per call
)

type fiemapHeader struct {
	Start, Length                uint64
	Flags, Mapped, Count, unused uint32
}

type fiemapExtent struct {
	Logical, Physical, Length uint64
	_                         [2]uint64
	Flags                     uint32
	_                         [3]uint32
}

type fiemapReq struct {
	fiemapHeader
	Extents [fiemapBatch]fiemapExtent
}

// ErrNoMap: the file system cannot list a file's extents (tmpfs, FUSE).
var ErrNoMap = errors.New("the file system does not map a file's blocks (no FIEMAP)")

// fiemap lists every extent of the open file fd, within its size and past
// it, in order. It does not flush the file first (FIEMAP_FLAG_SYNC):
// space written but not yet written back shows as delayed allocation
// (data), or, inside an extent allocated unwritten, as unwritten (Map
// corrects that with SEEK_DATA).
func fiemap(fd int) ([]AllocExtent, error) {
	var out []AllocExtent
	req := new(fiemapReq)
	for start := uint64(0); ; {
		req.fiemapHeader = fiemapHeader{Start: start, Length: ^uint64(0) - start, Count: fiemapBatch}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsIocFiemap, uintptr(unsafe.Pointer(req)))
		switch {
		case e == unix.EOPNOTSUPP || e == unix.ENOTTY || e == unix.EINVAL:
			return nil, ErrNoMap
		case e != 0:
			return nil, e
		case req.Mapped == 0:
			return out, nil
		}
		for _, x := range req.Extents[:req.Mapped] {
			ext := AllocExtent{Off: int64(x.Logical), End: int64(x.Logical + x.Length), Unwritten: x.Flags&fiemapExtentUnwrit != 0}
			out = appendMerged(out, ext)
			if x.Flags&fiemapExtentLast != 0 {
				return out, nil
			}
		}
		last := req.Extents[req.Mapped-1]
		start = last.Logical + last.Length
	}
}

// appendMerged appends e to exts, merging it with the last extent when
// they touch and are of one kind.
func appendMerged(exts []AllocExtent, e AllocExtent) []AllocExtent {
	if e.End <= e.Off {
		return exts
	}
	if n := len(exts); n > 0 && exts[n-1].End == e.Off && exts[n-1].Unwritten == e.Unwritten {
		exts[n-1].End = e.End
		return exts
	}
	return append(exts, e)
}
