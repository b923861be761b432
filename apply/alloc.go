package apply

import (
	"fmt"
	"os"

	"github.com/pbfs/pbfs/internal/sparse"
)

// A resync gives a file the primary's allocation, not only its bytes,
// as replaying the batches does: data where the primary has data (zeros
// written are data), space allocated and never written where it has
// that, holes where it has holes, and the same preallocation past the
// size (fallocate FALLOC_FL_KEEP_SIZE). A resync used to truncate every
// file to its size, which freed the preallocation past it, and to punch
// every page of zeros: contents were equal, and a database promoted on
// such a copy met ENOSPC where its primary had reserved the room.

// matching reports whether p is the file whose blocks are coming and the
// primary sent its map.
func (r *Reconciler) matching(p string) bool {
	return r.cur != nil && r.cur.Path == p && r.cur.MatchAlloc
}

// writeData writes the parts of data (at off) that alloc calls data.
func writeData(f *os.File, off int64, data []byte, alloc []sparse.AllocExtent) error {
	end := off + int64(len(data))
	for _, e := range alloc {
		if e.End <= off || e.Unwritten {
			continue
		}
		if e.Off >= end {
			break
		}
		a, b := max(e.Off, off), min(e.End, end)
		if _, err := f.WriteAt(data[a-off:b-off], a); err != nil {
			return err
		}
	}
	return nil
}

// finishData gives s.Path its size and, with a map, the primary's
// allocation. Without a map the size is set by a truncate even when it
// is already right, as before maps: that frees what is allocated past it.
func (r *Reconciler) finishData(s *Spec) error {
	f, err := openRegular(r.a.root, s.Path, os.O_RDWR)
	if err != nil {
		return err
	}
	defer f.Close()
	size := int64(s.Size)
	if !s.MatchAlloc {
		return f.Truncate(size)
	}
	if fi, err := f.Stat(); err != nil {
		return err
	} else if fi.Size() != size {
		if err := f.Truncate(size); err != nil {
			return err
		}
	}
	err = sparse.Match(f, size, s.Alloc)
	if outOfRoom(err) && r.sweepOpen() {
		err = sparse.Match(f, size, s.Alloc)
	}
	if err != nil {
		return fmt.Errorf("give %s the primary's allocation: %w", s.Path, err)
	}
	return nil
}
