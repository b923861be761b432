package apply

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/sparse"
)

// Holes: a resync punches what the primary holds as zeros instead of
// writing them, so a backup's copy of a sparse file stays as sparse.

// punch makes [off, off+n) of f a hole, or zeros where the file system
// cannot punch.
func punch(f *os.File, off, n int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) {
		_, err = f.WriteAt(make([]byte, n), off)
	}
	return err
}

// zeroPage is the unit writeSparse leaves as a hole.
const zeroPage = 4096

// writeSparse writes data at off, page by page: runs of pages of zeros
// are punched (zeros are zeros to a reader), the rest written.
func writeSparse(f *os.File, off int64, data []byte) error {
	for start := 0; start < len(data); {
		end := min(start+zeroPage, len(data))
		zero := sparse.AllZero(data[start:end])
		for end < len(data) {
			next := min(end+zeroPage, len(data))
			if sparse.AllZero(data[end:next]) != zero {
				break
			}
			end = next
		}
		var err error
		if zero {
			err = punch(f, off+int64(start), int64(end-start))
		} else {
			_, err = f.WriteAt(data[start:end], off+int64(start))
		}
		if err != nil {
			return err
		}
		start = end
	}
	return nil
}
