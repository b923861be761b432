package apply

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Resyncs keep holes holes: a block that is a hole on the primary travels
// as an empty checksum, is never read or sent, and is punched on the
// backup if the backup has data there. A resync used to read the holes of
// sparse files as zeros and write them out: 1.7 GB of sparse files took
// 7.3 GB on the backup.

// Extent is a range [Off, End) of a file that holds data.
type Extent struct{ Off, End int64 }

// DataExtents lists the data of the first size bytes of the open file fd,
// with SEEK_DATA and SEEK_HOLE. Where the file system cannot tell, the
// whole file is data.
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

// HasData reports whether [off, end) overlaps a data extent of exts
// (sorted, as DataExtents returns them).
func HasData(exts []Extent, off, end int64) bool {
	for _, e := range exts {
		if e.End > off && e.Off < end {
			return true
		}
		if e.Off >= end {
			return false
		}
	}
	return false
}

// HoleSum is the checksum a resync sends for a block that is all hole.
var HoleSum = []byte{}

// IsHole reports whether a block checksum stands for a hole.
func IsHole(sum []byte) bool { return len(sum) == 0 }
