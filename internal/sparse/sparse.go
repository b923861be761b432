// Package sparse lists where a sparse file holds data, so that readers of
// whole files (resync's block checksums, verify's digests) skip its holes
// instead of reading them as zeros.
package sparse

import (
	"bytes"
	"errors"
	"io"
	"os"

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
		if errors.Is(err, unix.ENXIO) {
			break // the file was cut below start since SEEK_DATA found it
		}
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

// ReadBlocks reads, in order, every block of f that overlaps data: blocks
// of block bytes at multiples of block, the last one cut at size (f's size
// when the caller took it). fn gets each block's offset and bytes, in a
// buffer reused for the next. A block read short (the file was cut since)
// is the last: ReadBlocks returns the size as read, else size.
func ReadBlocks(f *os.File, size, block int64, fn func(off int64, b []byte) error) (int64, error) {
	exts, err := DataExtents(int(f.Fd()), size)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, block)
	next := int64(0) // blocks below next are done
	for _, e := range exts {
		for off := max(next, e.Off/block*block); off < e.End; off += block {
			want := min(block, size-off)
			n, err := f.ReadAt(buf[:want], off)
			if err != nil && !errors.Is(err, io.EOF) {
				return 0, err
			}
			if n > 0 {
				if err := fn(off, buf[:n]); err != nil {
					return 0, err
				}
			}
			if int64(n) < want {
				return off + int64(n), nil
			}
			next = off + block
		}
	}
	return size, nil
}

// zeroPage is what AllZero compares against, a page at a time.
var zeroPage [4096]byte

// AllZero reports whether b holds only zero bytes: a block a reader cannot
// tell from a hole.
func AllZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroPage))
		if !bytes.Equal(b[:n], zeroPage[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}
