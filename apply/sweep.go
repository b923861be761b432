package apply

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
)

// A resync's entries come parents first, each directory's whole subtree
// right after it (the primary walks its tree depth first). So once an
// entry arrives that is not under a directory, that directory has been
// listed whole, and what the backup holds in it and the primary did not
// list can go at once, not only at Done: on a backup whose volume is full
// (bytes or inodes), the files the primary no longer has must make room
// for the ones it sends, or the resync fails every time. Should entries
// ever come in another order, a directory swept too early only makes the
// resync recreate what arrives in it later.

// When the volume has no room (ENOSPC, EDQUOT) for an entry or a block,
// the directories still being listed are swept too, and the step is tried
// once more: what they hold unlisted so far is either gone on the primary
// or listed later, and then made again (its data sent in full). A resync
// then ends whenever the primary's tree fits, whatever the backup held.

// sweepOpen sweeps every directory still being listed, deepest first, and
// reports whether it removed anything.
func (r *Reconciler) sweepOpen() bool {
	before := r.Removed
	for i := len(r.open) - 1; i >= 0; i-- {
		if err := r.sweep(r.open[i]); err != nil {
			r.a.log.Warn("resync: sweep for room", "dir", r.open[i], "err", err)
		}
	}
	if r.Removed > before {
		r.a.log.Warn("resync: the volume is out of room; removed what it holds unlisted so far", "removed", r.Removed-before)
	}
	return r.Removed > before
}

func outOfRoom(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// closeDirs sweeps every open directory that p is not inside of, deepest
// first; the caller then opens p if it is a directory.
func (r *Reconciler) closeDirs(p string) error {
	for len(r.open) > 0 {
		top := r.open[len(r.open)-1]
		if top == "." || strings.HasPrefix(p, top+"/") {
			return nil
		}
		r.open = r.open[:len(r.open)-1]
		if err := r.sweep(top); err != nil {
			return err
		}
	}
	return nil
}

// sweep removes what dir holds that the resync did not list. A directory
// that is not the volume's (another file system, the backup's journal) is
// left for Done, which says so.
func (r *Reconciler) sweep(dir string) error {
	d, err := r.a.root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := childOf(dir, e.Name())
		if r.seen[p] {
			continue
		}
		if e.IsDir() {
			if fi, err := r.a.root.Lstat(p); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok && r.a.foreign(st) != "" {
					continue
				}
			}
		}
		if err := r.a.removeAll(p); err != nil {
			return err
		}
		r.Removed++
	}
	return nil
}

func childOf(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}
