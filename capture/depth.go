package capture

import (
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// Paths the journal records are at most journal.MaxPath bytes. Every name
// the capture core creates or looks up comes through a syscall on a path
// relative to the backing root, which the kernel already limits to fewer
// bytes; only moving a directory to a longer path lengthens the paths of
// the files inside it. checkMoveDepth refuses such a move when a file the
// kernel knows of (and may write to) would end up with a path too long to
// record.

// notePath keeps table.longest, an upper bound on the length of any
// known node's path, at least n.
func (t *table) notePath(n int) {
	for {
		cur := t.longest.Load()
		if int64(n) <= cur || t.longest.CompareAndSwap(cur, int64(n)) {
			return
		}
	}
}

// checkMoveDepth refuses (ENAMETOOLONG) moving the directory st at from to
// to if a known node inside it would get a path longer than MaxPath. The
// caller holds table.mu exclusively.
func (f *FS) checkMoveDepth(from, to string, st *unix.Stat_t) error {
	grow := int64(len(to) - len(from))
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || grow <= 0 {
		return nil
	}
	t := f.table
	if t.longest.Load()+grow <= journal.MaxPath {
		t.longest.Add(grow) // still a bound after the move
		return nil
	}
	// The bound says it might not fit: measure. Every path is recomputed,
	// so the bound becomes exact again.
	t.mapMu.Lock()
	var longest, inside int64
	prefix := from + "/"
	for _, n := range t.byID {
		p, ok := t.pathLocked(n)
		if !ok {
			continue
		}
		longest = max(longest, int64(len(p)))
		if strings.HasPrefix(p, prefix) {
			inside = max(inside, int64(len(p)))
		}
	}
	t.mapMu.Unlock()
	t.longest.Store(longest)
	if inside+grow > journal.MaxPath {
		return unix.ENAMETOOLONG
	}
	t.notePath(int(inside + grow))
	return nil
}
