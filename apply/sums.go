package apply

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/sparse"
)

// Sums is what a resync says of one file's blocks: a checksum for each
// block that holds data, and a hole everywhere else. A primary from before
// sparse sums lists every block (Sums[i] is block i's, HoleSum for a
// hole); a newer one (Sparse) lists only the blocks with data, in Index
// (ascending), Sums[i] being block Index[i]'s. A 1 TiB sparse file with a
// few written blocks then takes a few checksums, not 16 million.
type Sums struct {
	Blocks uint64 // blocks in the file (its size over the block size, rounded up)
	Sparse bool   // Index lists the blocks Sums are of
	Index  []uint64
	Sums   [][]byte
}

// ErrBadSums refuses sums that do not describe the file.
var ErrBadSums = errors.New("block sums do not fit the file")

// Check validates s against a file of size bytes in blocks of blockSize.
func (s Sums) Check(size uint64, blockSize int) error {
	want := (size + uint64(blockSize) - 1) / uint64(blockSize)
	switch {
	case !s.Sparse && uint64(len(s.Sums)) != s.Blocks:
		return fmt.Errorf("%w: %d sums for %d blocks", ErrBadSums, len(s.Sums), s.Blocks)
	case s.Sparse && len(s.Index) != len(s.Sums):
		return fmt.Errorf("%w: %d sums for %d indices", ErrBadSums, len(s.Sums), len(s.Index))
	case !s.Sparse && s.Blocks > want:
		return fmt.Errorf("%w: %d blocks for %d bytes", ErrBadSums, s.Blocks, size)
	case s.Sparse && s.Blocks != want:
		return fmt.Errorf("%w: %d blocks for %d bytes", ErrBadSums, s.Blocks, size)
	}
	for i, idx := range s.Index {
		if idx >= s.Blocks || (i > 0 && idx <= s.Index[i-1]) {
			return fmt.Errorf("%w: block %d out of order or past the end", ErrBadSums, idx)
		}
		if IsHole(s.Sums[i]) {
			return fmt.Errorf("%w: block %d listed as a hole", ErrBadSums, idx)
		}
	}
	return nil
}

// each calls fn for every block in order, with its sum (HoleSum for a
// hole), until fn fails.
func (s Sums) each(fn func(i uint64, sum []byte) error) error {
	j := 0
	for i := uint64(0); i < s.Blocks; i++ {
		sum := HoleSum
		switch {
		case !s.Sparse:
			sum = s.Sums[i]
		case j < len(s.Index) && s.Index[j] == i:
			sum = s.Sums[j]
			j++
		}
		if err := fn(i, sum); err != nil {
			return err
		}
	}
	return nil
}

// data lists the blocks that hold data.
func (s Sums) data() []uint64 {
	if s.Sparse {
		return append([]uint64(nil), s.Index...)
	}
	var out []uint64
	for i, sum := range s.Sums {
		if !IsHole(sum) {
			out = append(out, uint64(i))
		}
	}
	return out
}

// Compare lists the blocks of p the primary must send, given the
// primary's block checksums: blocks whose data differs. Where p has a
// hole, a block of zeros on the primary is taken as equal: the bytes are,
// and Finish gives p the primary's allocation (alloc.go). Without a map
// from the primary, where it has a hole and p has data, p gets a hole.
// With fresh set (p was just created empty) nothing is read.
func (r *Reconciler) Compare(p string, blockSize int, theirs Sums, fresh bool) ([]uint64, error) {
	if fresh {
		return theirs.data(), nil
	}
	f, err := openRegular(r.a.root, p, os.O_RDWR)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	exts, err := sparse.DataExtents(int(f.Fd()), st.Size)
	if err != nil {
		return nil, err
	}
	ours := sparse.NewCursor(exts)
	var want []uint64
	buf := make([]byte, blockSize)
	err = theirs.each(func(i uint64, sum []byte) error {
		off := int64(i) * int64(blockSize)
		end := min(off+int64(blockSize), st.Size)
		data := off < end && ours.HasData(off, end)
		switch {
		case IsHole(sum):
			if data && !r.matching(p) {
				if err := punch(f, off, end-off); err != nil {
					return fmt.Errorf("punch %s at %d: %w", p, off, err)
				}
			}
			return nil
		case off >= st.Size:
			want = append(want, i)
			return nil
		}
		n, err := f.ReadAt(buf[:end-off], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if string(BlockSum(buf[:n])) != string(sum) {
			want = append(want, i)
		}
		return nil
	})
	return want, err
}

// WriteBlock writes one block the primary sent. Its pages of zeros are
// punched rather than written, so a sparse file stays sparse: written
// whole, a 4 KiB edit in a 1 TiB sparse file left the backup with the
// block's 64 KiB allocated, and a backup's disk use grew with each resync.
//
// With a map from the primary, only what the map calls data is written,
// zeros included; Finish makes the rest holes or unwritten space.
func (r *Reconciler) WriteBlock(p string, off int64, data []byte) error {
	f, err := openRegular(r.a.root, p, os.O_WRONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	write := writeSparse
	if r.matching(p) {
		write = func(f *os.File, off int64, data []byte) error { return writeData(f, off, data, r.cur.Alloc) }
	}
	err = write(f, off, data)
	if outOfRoom(err) && r.sweepOpen() {
		err = write(f, off, data)
	}
	return err
}
