package sparse

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"golang.org/x/sys/unix"
)

// A file's allocation is more than where its data is: space allocated
// and never written (fallocate, a database's preallocated tablespace)
// reads as zeros like a hole but is the file's own, inside its size or
// past it (FALLOC_FL_KEEP_SIZE), and zeros written are data, not a hole.
// A copy that turns one into another reads the same and still differs:
// a database that preallocated to be sure of its room meets ENOSPC on a
// copy that lost the preallocation.

// AllocExtent is a range [Off, End) of a file that is allocated: data,
// or with Unwritten, space that reads as zeros.
type AllocExtent struct {
	Off, End  int64
	Unwritten bool
}

// Map lists where the open file fd is allocated, in order, within its
// size and past it; what it leaves out is a hole. The extents come from
// FIEMAP, without flushing the file first. Pages written into an
// unwritten extent and not yet written back leave FIEMAP saying
// unwritten, so inside size wherever SEEK_DATA finds data in an extent
// FIEMAP calls unwritten (pages in the page cache, written or only read),
// Map reads those pages: a page holding a byte other than zero is data.
// It fails with ErrNoMap where the file system has no FIEMAP (tmpfs).
func Map(fd int, size int64) ([]AllocExtent, error) {
	exts, err := fiemap(fd)
	if err != nil {
		return nil, err
	}
	seek, err := DataExtents(fd, size)
	if err != nil {
		return nil, err
	}
	var out []AllocExtent
	for _, e := range overlay(exts, seek) {
		if !e.Unwritten || !e.cached {
			out = appendMerged(out, e.AllocExtent)
			continue
		}
		if out, err = splitZeros(fd, out, e.Off, e.End); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// marked is an extent of a map in the making: cached, SEEK_DATA found
// data in it.
type marked struct {
	AllocExtent
	cached bool
}

// overlay cuts exts where seek's data ranges begin and end, marking the
// pieces inside them; the data SEEK_DATA finds where FIEMAP has nothing
// (a race with a write) is data.
func overlay(exts []AllocExtent, seek []Extent) []marked {
	cuts := make([]int64, 0, 2*(len(exts)+len(seek)))
	for _, e := range exts {
		cuts = append(cuts, e.Off, e.End)
	}
	for _, d := range seek {
		cuts = append(cuts, d.Off, d.End)
	}
	sort.Slice(cuts, func(i, j int) bool { return cuts[i] < cuts[j] })
	var out []marked
	i, j := 0, 0
	for k := 0; k+1 < len(cuts); k++ {
		a, b := cuts[k], cuts[k+1]
		if a == b {
			continue
		}
		for i < len(exts) && exts[i].End <= a {
			i++
		}
		for j < len(seek) && seek[j].End <= a {
			j++
		}
		cached := j < len(seek) && seek[j].Off <= a
		switch {
		case i < len(exts) && exts[i].Off <= a:
			out = append(out, marked{AllocExtent{a, b, exts[i].Unwritten}, cached})
		case cached:
			out = append(out, marked{AllocExtent{Off: a, End: b}, false})
		}
	}
	return out
}

// splitZeros appends [off, end) of fd to exts page by page: unwritten
// where a page reads as zeros, data where it does not.
func splitZeros(fd int, exts []AllocExtent, off, end int64) ([]AllocExtent, error) {
	buf := make([]byte, len(zeroPage))
	for p := off; p < end; {
		n := min(int64(len(buf))-p%int64(len(buf)), end-p)
		k, err := unix.Pread(fd, buf[:n], p)
		if err != nil {
			return nil, err
		}
		exts = appendMerged(exts, AllocExtent{Off: p, End: p + n, Unwritten: AllZero(buf[:k])})
		p += n
	}
	return exts, nil
}

// ErrBadMap refuses a map that is out of order, overlapping, empty-ranged
// or beyond the offsets a file can have.
var ErrBadMap = errors.New("allocation map out of order or out of range")

// maxOffset bounds a map's offsets as the journal bounds a file's.
const maxOffset = 1 << 62

// CheckMap validates a map received from elsewhere.
func CheckMap(exts []AllocExtent) error {
	for i, e := range exts {
		if e.Off < 0 || e.End <= e.Off || e.End > maxOffset || (i > 0 && e.Off < exts[i-1].End) {
			return fmt.Errorf("%w: extent %d [%d, %d)", ErrBadMap, i, e.Off, e.End)
		}
	}
	return nil
}

// Allocated merges a map's data and unwritten extents: where the file
// holds space at all.
func Allocated(exts []AllocExtent) []Extent {
	var out []Extent
	for _, e := range exts {
		if n := len(out); n > 0 && out[n-1].End == e.Off {
			out[n-1].End = e.End
			continue
		}
		out = append(out, Extent{e.Off, e.End})
	}
	return out
}

// kindAt is a map read in ascending order: the kind of the range that
// starts at off, and where that kind ends.
type kindAt struct{ exts []AllocExtent }

const (
	hole = iota
	unwritten
	data
)

func (k *kindAt) at(off int64) (kind int, end int64) {
	for len(k.exts) > 0 && k.exts[0].End <= off {
		k.exts = k.exts[1:]
	}
	switch {
	case len(k.exts) == 0:
		return hole, maxOffset
	case k.exts[0].Off > off:
		return hole, k.exts[0].Off
	case k.exts[0].Unwritten:
		return unwritten, k.exts[0].End
	}
	return data, k.exts[0].End
}

// rewrite writes [off, end) of f with the bytes it reads there, so that
// zeros read from a hole or an unwritten extent become data.
func rewrite(f *os.File, off, end int64) error {
	buf := make([]byte, min(end-off, 1<<20))
	for off < end {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			return err
		}
		off += int64(n)
	}
	return nil
}

func fallocate(f *os.File, mode uint32, off, end int64) error {
	if err := unix.Fallocate(int(f.Fd()), mode, off, end-off); err != nil {
		return fmt.Errorf("fallocate %#x [%d, %d): %w", mode, off, end, err)
	}
	return nil
}
