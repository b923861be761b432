package capture

import (
	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// Getxattr reads extended attribute name of n into buf (size probe when
// buf is empty).
//
// The kernel asks for security.capability once for every file before its
// first write. A file this mount created and never gave one has none, and
// that answer costs no path walk through /proc (a third of the request).
func (f *FS) Getxattr(n *Node, name string, buf []byte) (int, error) {
	if name == capsXattr && n.noCaps.Load() {
		return 0, unix.ENODATA
	}
	f.table.mu.RLock()
	defer f.table.mu.RUnlock()
	p, err := f.nodePath(n)
	if err != nil {
		return 0, err
	}
	var k int
	err = f.entryName(p, func(entry string) (err error) {
		k, err = unix.Lgetxattr(entry, name, buf)
		return err
	})
	return k, f.quiet(err)
}

// capsXattr holds file capabilities; new files never inherit it.
const capsXattr = "security.capability"

// Listxattr lists n's extended attribute names into buf.
func (f *FS) Listxattr(n *Node, buf []byte) (int, error) {
	f.table.mu.RLock()
	defer f.table.mu.RUnlock()
	p, err := f.nodePath(n)
	if err != nil {
		return 0, err
	}
	var k int
	err = f.entryName(p, func(entry string) (err error) {
		k, err = unix.Llistxattr(entry, buf)
		return err
	})
	return k, f.quiet(err)
}

// Setxattr sets extended attribute name of n and records it. killSGID
// (the kernel asks, with POSIX ACLs, when a caller outside the file's
// group and without CAP_FSETID sets an ACL) clears setgid after it, as
// setting an ACL on a local file system does.
func (f *FS) Setxattr(n *Node, name string, value []byte, flags int, killSGID bool) error {
	if err := checkXattr(name, value, flags); err != nil {
		return err
	}
	return f.xattrOp(n, journal.Op{Kind: journal.KindSetxattr, Name: name, Data: append([]byte(nil), value...), Flags: uint32(flags)}, killSGID)
}

// Removexattr removes extended attribute name of n and records it.
func (f *FS) Removexattr(n *Node, name string) error {
	if err := checkXattr(name, nil, 0); err != nil {
		return err
	}
	return f.xattrOp(n, journal.Op{Kind: journal.KindRemovexattr, Name: name}, false)
}

func (f *FS) xattrOp(n *Node, op journal.Op, killSGID bool) error {
	f.begin()
	defer f.end()
	n.mu.Lock()
	defer n.mu.Unlock()
	f.table.mu.RLock()
	defer f.table.mu.RUnlock()
	p, err := f.nodePath(n)
	if err != nil {
		return err
	}
	if op.Kind == journal.KindSetxattr {
		if op.Name == capsXattr {
			n.noCaps.Store(false) // before the syscall: a failed set may still have set it
		}
		err = f.entryName(p, func(name string) error { return unix.Lsetxattr(name, op.Name, op.Data, int(op.Flags)) })
	} else {
		err = f.entryName(p, func(name string) error { return unix.Lremovexattr(name, op.Name) })
	}
	if err != nil {
		return f.quiet(err)
	}
	if f.captures(n) {
		f.metaLog(n, op)
	}
	if op.Name == aclDefault {
		f.aclChanged(n)
	}
	if killSGID {
		return f.clearSetgid(n, p)
	}
	return nil
}

// quiet passes through the errors xattr calls return in normal use.
func (f *FS) quiet(err error) error {
	if err == unix.ENODATA || err == unix.ERANGE || err == unix.ENOTSUP || err == unix.EEXIST {
		return err
	}
	return f.fail("xattr", err)
}
