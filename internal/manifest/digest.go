package manifest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"os"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/sparse"
)

// A regular file's contents are compared by a digest that does not read
// its holes (docs/FORMAT.md, "Manifest digest"): SHA-256 over, for every
// block of digestBlock bytes at offset o (the last one cut at the size)
// that holds a byte other than zero, o as 8 big-endian bytes followed by
// the block; and then the size as 8 big-endian bytes. Two files with the
// same size have the same digest exactly when their bytes are equal, and a
// hole digests as zeros do, whether a side holds it as a hole or as
// written zeros. Only the blocks that overlap data (SEEK_DATA) are read:
// a 1 TiB sparse file with a few written blocks digests in microseconds,
// where hashing every byte took `pbfs verify` past its 10-minute timeout.

// digestBlock is the unit of a manifest digest.
const digestBlock = 64 << 10

// digest reads f, whose size fstat gave as size, and returns its digest and
// the size as read (less, should the file have been cut meanwhile). It
// stops once ctx ends.
func digest(ctx context.Context, f *os.File, size int64) (int64, []byte, error) {
	h := sha256.New()
	var hdr [8]byte
	size, err := sparse.ReadBlocks(f, size, digestBlock, func(off int64, b []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !sparse.AllZero(b) {
			binary.BigEndian.PutUint64(hdr[:], uint64(off))
			h.Write(hdr[:])
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(size))
	h.Write(b[:])
	return size, h.Sum(nil), nil
}

// fileDigest opens p below root without following a symlink or blocking
// on a FIFO swapped in, and digests it.
func fileDigest(ctx context.Context, root *os.Root, p string) (int64, []byte, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	return digestOpen(ctx, f)
}

// DigestFile returns the digest of the regular file at p, read as Walk
// reads it (the test helpers' tree comparisons use it).
func DigestFile(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	_, sum, err := digestOpen(context.Background(), f)
	return sum, err
}

// digestOpen digests the open file f, which must be a regular file.
func digestOpen(ctx context.Context, f *os.File) (int64, []byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, nil, errNotRegular
	}
	return digest(ctx, f, st.Size)
}

// errNotRegular: the path was replaced by something other than a regular
// file between its stat and its open.
var errNotRegular = errors.New("no longer a regular file")
