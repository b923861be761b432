package apply

import (
	"errors"
	"fmt"
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
