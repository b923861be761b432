package capture

import (
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// Lookup finds name in parent.
func (f *FS) Lookup(parent *Node, name string) (*Node, Attr, error) {
	f.table.mu.RLock()
	defer f.table.mu.RUnlock()
	pp, err := f.nodePath(parent)
	if err != nil {
		return nil, Attr{}, err
	}
	var st unix.Stat_t
	p := childPath(pp, name)
	if err := unix.Fstatat(f.root, p, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, Attr{}, f.fail("lookup", err)
	}
	f.table.notePath(len(p))
	n := f.table.bind(parent, name, st.Ino, st.Mode&unix.S_IFMT, 1)
	return n, attrFromStat(&st), nil
}

// owner returns the uid and gid a new file in parent gets: the caller's,
// or the parent's group when the parent is setgid.
func (f *FS) owner(parentPath string, c Caller) (uint32, uint32) {
	var st unix.Stat_t
	if unix.Fstatat(f.root, parentPath, &st, 0) == nil && st.Mode&unix.S_ISGID != 0 {
		return c.UID, st.Gid
	}
	return c.UID, c.GID
}

// created finishes a create-kind op: owner, attributes, table and record.
// fd is the new file if the caller opened it, else -1.
//
// mode is the mode the caller asked for, umask applied (createMode). The
// daemon keeps its own umask, so its journal files are not world-writable;
// the new file gets exactly mode here, plus the setgid bit a setgid parent
// gives a new directory, unless it inherited a default ACL (inherit), which
// the backing file system has combined with mode already.
func (f *FS) created(kind journal.Kind, parent *Node, pp, name string, fd int, c Caller, target string, mode uint32, inherit bool) (*Node, Attr, error) {
	p := childPath(pp, name)
	uid, gid := f.owner(pp, c)
	var st unix.Stat_t
	var err error
	if fd >= 0 {
		if err = unix.Fchown(fd, int(uid), int(gid)); err == nil {
			err = unix.Fstat(fd, &st)
		}
	} else if err = unix.Fchownat(f.root, p, int(uid), int(gid), unix.AT_SYMLINK_NOFOLLOW); err == nil {
		err = unix.Fstatat(f.root, p, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	if want := mode&0o7777 | st.Mode&unix.S_ISGID; err == nil && !inherit && kind != journal.KindSymlink && st.Mode&0o7777 != want {
		if fd >= 0 {
			err = unix.Fchmod(fd, want)
		} else {
			err = unix.Fchmodat(f.root, p, want, 0)
		}
		st.Mode = st.Mode&^0o7777 | want
	}
	var acls []journal.Op
	// Only a parent's default ACL gives a new entry ACLs, here or, while
	// a removed one has not reached it yet, on a backup.
	if stale := f.staleDefaultACL(parent); err == nil && (inherit || stale) {
		acls, err = f.inheritedACLs(kind, p, stale)
	}
	if err != nil {
		// Undo, so the volume never holds a file the journal does not.
		flags := 0
		if kind == journal.KindMkdir {
			flags = unix.AT_REMOVEDIR
		}
		unix.Unlinkat(f.root, p, flags)
		return nil, Attr{}, f.fail(kind.String(), err)
	}
	f.table.notePath(len(p))
	n := f.table.bindNew(parent, name, st.Ino, st.Mode&unix.S_IFMT, 1)
	n.noCaps.Store(true)
	op := journal.Op{Kind: kind, Fid: n.id, Path: p, Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid, Parent: parent.id, Target: target}
	if kind == journal.KindMknod {
		op.Mode, op.Rdev = st.Mode, st.Rdev
	}
	f.recordNS(op)
	if len(acls) > 0 && f.captures(n) {
		n.mu.Lock()
		for _, acl := range acls {
			f.metaLog(n, acl)
		}
		n.mu.Unlock()
	}
	f.bornTime(n, &st)
	return n, attrFromStat(&st), nil
}

// Mkdir makes a directory.
func (f *FS) Mkdir(parent *Node, name string, mode uint32, c Caller) (*Node, Attr, error) {
	if err := checkName(name); err != nil {
		return nil, Attr{}, err
	}
	f.begin()
	defer f.end()
	f.table.mu.Lock()
	defer f.table.mu.Unlock()
	pp, err := f.nodePath(parent)
	if err != nil {
		return nil, Attr{}, err
	}
	mode, inherit := f.createMode(pp, mode, c)
	if err := unix.Mkdirat(f.root, childPath(pp, name), mode&0o7777); err != nil {
		return nil, Attr{}, f.fail("mkdir", err)
	}
	return f.created(journal.KindMkdir, parent, pp, name, -1, c, "", mode, inherit)
}

// Mknod makes a device, fifo, socket or empty regular file.
func (f *FS) Mknod(parent *Node, name string, mode uint32, rdev uint64, c Caller) (*Node, Attr, error) {
	if err := checkName(name); err != nil {
		return nil, Attr{}, err
	}
	if err := checkMknod(mode); err != nil {
		return nil, Attr{}, err
	}
	f.begin()
	defer f.end()
	f.table.mu.Lock()
	defer f.table.mu.Unlock()
	pp, err := f.nodePath(parent)
	if err != nil {
		return nil, Attr{}, err
	}
	mode, inherit := f.createMode(pp, mode, c)
	if err := unix.Mknodat(f.root, childPath(pp, name), mode, int(rdev)); err != nil {
		return nil, Attr{}, f.fail("mknod", err)
	}
	kind := journal.KindMknod
	if mode&unix.S_IFMT == unix.S_IFREG || mode&unix.S_IFMT == 0 {
		kind = journal.KindCreate
	}
	return f.created(kind, parent, pp, name, -1, c, "", mode, inherit)
}

// Symlink makes a symbolic link name in parent pointing at target.
func (f *FS) Symlink(parent *Node, name, target string, c Caller) (*Node, Attr, error) {
	if err := checkName(name); err != nil {
		return nil, Attr{}, err
	}
	switch {
	case target == "":
		return nil, Attr{}, unix.ENOENT
	case len(target) > journal.MaxPath || strings.IndexByte(target, 0) >= 0:
		return nil, Attr{}, unix.ENAMETOOLONG
	}
	f.begin()
	defer f.end()
	f.table.mu.Lock()
	defer f.table.mu.Unlock()
	pp, err := f.nodePath(parent)
	if err != nil {
		return nil, Attr{}, err
	}
	if err := unix.Symlinkat(target, f.root, childPath(pp, name)); err != nil {
		return nil, Attr{}, f.fail("symlink", err)
	}
	return f.created(journal.KindSymlink, parent, pp, name, -1, c, target, 0o777, false)
}

// Create makes and opens a regular file. If the name exists and flags lack
// O_EXCL, it opens the existing file instead, as open(2) would, and with
// kill and O_TRUNC clears its setuid and setgid bits as Open does.
func (f *FS) Create(parent *Node, name string, flags int, mode uint32, c Caller, kill bool) (*Node, *Handle, Attr, error) {
	if err := checkName(name); err != nil {
		return nil, nil, Attr{}, err
	}
	f.begin()
	defer f.end()
	f.table.mu.Lock()
	pp, err := f.nodePath(parent)
	if err != nil {
		f.table.mu.Unlock()
		return nil, nil, Attr{}, err
	}
	mode, inherit := f.createMode(pp, mode, c)
	fd, err := unix.Openat(f.root, childPath(pp, name), backingFlags(flags)|unix.O_CREAT|unix.O_EXCL, mode&0o7777)
	if err == unix.EEXIST && flags&unix.O_EXCL == 0 {
		f.table.mu.Unlock()
		f.end()
		n, _, err := f.Lookup(parent, name)
		f.begin()
		if err != nil {
			return nil, nil, Attr{}, err
		}
		h, err := f.open(n, flags)
		if err != nil {
			return nil, nil, Attr{}, err
		}
		if kill && flags&unix.O_TRUNC != 0 {
			n.mu.Lock()
			changed, err := f.killPriv(n, h.fd, &c)
			n.mu.Unlock()
			if changed {
				h.cleared.Store(true)
			}
			if err != nil {
				f.Release(h)
				return nil, nil, Attr{}, err
			}
		}
		a, err := f.stat(n)
		return n, h, a, err
	}
	if err != nil {
		f.table.mu.Unlock()
		return nil, nil, Attr{}, f.fail("create", err)
	}
	n, a, err := f.created(journal.KindCreate, parent, pp, name, fd, c, "", mode, inherit)
	f.table.mu.Unlock()
	if err != nil {
		unix.Close(fd)
		return nil, nil, Attr{}, err
	}
	return n, f.newHandle(n, fd, flags), a, nil
}

// Link makes newName in newParent another name of n.
func (f *FS) Link(n, newParent *Node, newName string) (Attr, error) {
	if err := checkName(newName); err != nil {
		return Attr{}, err
	}
	f.begin()
	defer f.end()
	f.table.mu.Lock()
	defer f.table.mu.Unlock()
	op, err := f.nodePath(n)
	if err != nil {
		return Attr{}, err
	}
	pp, err := f.nodePath(newParent)
	if err != nil {
		return Attr{}, err
	}
	np := childPath(pp, newName)
	if err := f.checkCross(op, np, false); err != nil {
		return Attr{}, err
	}
	if err := unix.Linkat(f.root, op, f.root, np, 0); err != nil {
		return Attr{}, f.fail("link", err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(f.root, np, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Attr{}, f.fail("link", err)
	}
	oldParent := f.parentOf(n)
	f.table.notePath(len(np))
	f.table.bind(newParent, newName, st.Ino, st.Mode&unix.S_IFMT, 1)
	f.recordNS(journal.Op{Kind: journal.KindLink, Fid: n.id, Path: op, Path2: np, Parent: oldParent, Parent2: newParent.id})
	return attrFromStat(&st), nil
}

func (f *FS) parentOf(n *Node) uint64 {
	f.table.mapMu.Lock()
	defer f.table.mapMu.Unlock()
	if len(n.links) > 0 {
		return n.links[0].parent.id
	}
	return 0
}

// Remove unlinks name from parent (rmdir when dir is set).
func (f *FS) Remove(parent *Node, name string, dir bool) error {
	f.begin()
	defer f.end()
	f.table.mu.Lock()
	defer f.table.mu.Unlock()
	pp, err := f.nodePath(parent)
	if err != nil {
		return err
	}
	p := childPath(pp, name)
	var st unix.Stat_t
	if err := unix.Fstatat(f.root, p, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return f.fail("remove", err)
	}
	kind, flags := journal.KindUnlink, 0
	if dir {
		kind, flags = journal.KindRmdir, unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(f.root, p, flags); err != nil {
		return f.fail(kind.String(), err)
	}
	var fid uint64
	if n := f.table.lookupName(parent, name); n != nil {
		fid = n.id
		survives := st.Nlink > 1 && !dir
		if !f.table.unlink(n, parent, name, survives) && survives {
			f.findName(n)
		}
	}
	f.recordNS(journal.Op{Kind: kind, Fid: fid, Path: p, Parent: parent.id})
	return nil
}
