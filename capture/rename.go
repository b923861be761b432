package capture

import (
	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// Rename moves oldName in oldParent to newName in newParent, with
// renameat2 flags. RENAME_WHITEOUT leaves a whiteout (a 0:0 character
// device) at the source, recorded as a mknod after the rename.
func (f *FS) Rename(oldParent *Node, oldName string, newParent *Node, newName string, flags uint32) error {
	if err := checkRenameFlags(flags); err != nil {
		return err
	}
	if err := checkName(newName); err != nil {
		return err
	}
	f.begin()
	defer f.end()
	f.table.mu.Lock()
	defer f.table.mu.Unlock()
	opp, err := f.nodePath(oldParent)
	if err != nil {
		return err
	}
	npp, err := f.nodePath(newParent)
	if err != nil {
		return err
	}
	op, np := childPath(opp, oldName), childPath(npp, newName)
	var sst, dst unix.Stat_t
	if err := unix.Fstatat(f.root, op, &sst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return f.fail("rename", err)
	}
	destExists := unix.Fstatat(f.root, np, &dst, unix.AT_SYMLINK_NOFOLLOW) == nil
	if err := f.checkMoveDepth(op, np, &sst); err != nil {
		return err
	}
	if err := f.checkCross(op, np, sst.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
		return err
	}
	if destExists && flags&unix.RENAME_EXCHANGE != 0 && dst.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := f.checkCross(np, op, true); err != nil {
			return err
		}
	}
	if destExists && flags&unix.RENAME_EXCHANGE != 0 {
		if err := f.checkMoveDepth(np, op, &dst); err != nil {
			return err
		}
	}
	if err := unix.Renameat2(f.root, op, f.root, np, uint(flags)); err != nil {
		return f.fail("rename", err)
	}
	f.table.notePath(max(len(op), len(np)))
	src := f.table.bind(oldParent, oldName, sst.Ino, sst.Mode&unix.S_IFMT, 0)
	var dest *Node
	if destExists {
		dest = f.table.bind(newParent, newName, dst.Ino, dst.Mode&unix.S_IFMT, 0)
	}
	rec := journal.Op{Kind: journal.KindRename, Fid: src.id, Path: op, Path2: np, Flags: flags &^ unix.RENAME_WHITEOUT, Parent: oldParent.id, Parent2: newParent.id}
	switch {
	case dest == src:
		// Two names of one inode: rename(2) does nothing.
	case flags&journal.RenameExchange != 0:
		f.table.exchange(src, oldParent, oldName, dest, newParent, newName)
		rec.Fid2 = dest.id
	default:
		if dest != nil {
			rec.Fid2 = dest.id
			survives := dst.Nlink > 1 && dest.typ != sIFDIR
			if !f.table.unlink(dest, newParent, newName, survives) && survives {
				f.findName(dest)
			}
		}
		f.table.move(src, oldParent, oldName, newParent, newName)
	}
	f.recordNS(rec)
	if sst.Mode&unix.S_IFMT == unix.S_IFDIR {
		f.rereadTime(src.id) // its ".." may have changed
	}
	if dest != nil && dst.Mode&unix.S_IFMT == unix.S_IFDIR && flags&unix.RENAME_EXCHANGE != 0 {
		f.rereadTime(dest.id)
	}
	if flags&unix.RENAME_WHITEOUT != 0 && dest != src {
		f.recordWhiteout(oldParent, oldName, op)
	}
	return nil
}

// recordWhiteout records the whiteout RENAME_WHITEOUT left at p. The
// caller holds table.mu exclusively.
func (f *FS) recordWhiteout(parent *Node, name, p string) {
	var st unix.Stat_t
	if err := unix.Fstatat(f.root, p, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		// The rename went through; a whiteout the journal lacks must not
		// stay on the volume either.
		f.log.Error("stat the whiteout a rename left; removing it", "path", p, "err", err)
		unix.Unlinkat(f.root, p, 0)
		return
	}
	n := f.table.bindNew(parent, name, st.Ino, st.Mode&unix.S_IFMT, 0)
	f.recordNS(journal.Op{Kind: journal.KindMknod, Fid: n.id, Path: p, Mode: st.Mode, Rdev: st.Rdev, UID: st.Uid, GID: st.Gid, Parent: parent.id})
	f.bornTime(n, &st)
}
