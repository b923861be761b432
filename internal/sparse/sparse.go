// Package sparse lists where a sparse file holds data, so that readers of
// whole files (resync's block checksums, verify's digests) skip its holes
// instead of reading them as zeros.
package sparse

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Extent is a range [Off, End) of a file that holds data.
type Extent struct{ Off, End int64 }

// DataExtents lists the data of the first size bytes of the open file fd,
// with SEEK_DATA and SEEK_HOLE, in order. Where the file system cannot
// tell, the whole file is data.
func DataExtents(fd int, size int64) ([]Extent, error) {
	var out []Extent
	for off := int64(0); off < size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return []Extent{{0, size}}, nil
		}
		if err != nil {
			return nil, err
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		if start >= size {
			break
		}
		out = append(out, Extent{start, min(end, size)})
		off = end
	}
	return out, nil
}

// Cursor answers whether ranges asked in ascending order hold data, in
// amortized constant time.
type Cursor struct{ exts []Extent }

// NewCursor walks exts (sorted, as DataExtents returns them).
func NewCursor(exts []Extent) *Cursor { return &Cursor{exts: exts} }

// HasData reports whether [off, end) overlaps data; off must not go below
// an earlier call's.
func (c *Cursor) HasData(off, end int64) bool {
	for len(c.exts) > 0 && c.exts[0].End <= off {
		c.exts = c.exts[1:]
	}
	return len(c.exts) > 0 && c.exts[0].Off < end
}
