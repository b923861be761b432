package capture

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/xattr"
	"github.com/pbfs/pbfs/journal"
)

// The POSIX ACL attributes a new file or directory inherits from its
// parent's default ACL.
const (
	aclAccess  = "system.posix_acl_access"
	aclDefault = "system.posix_acl_default"
)

// SupportsACLs reports whether the backing file system keeps POSIX ACLs.
func (f *FS) SupportsACLs() bool {
	if f.noACL.Load() {
		return false
	}
	_, err := unix.Lgetxattr(f.procPath("."), aclAccess, nil)
	if errors.Is(err, unix.ENOTSUP) {
		f.noACL.Store(true)
		return false
	}
	return true
}

// createMode is the mode to create a new entry in directory pp with,
// from the mode and umask the caller gave, and whether the directory has
// a default ACL. A default ACL replaces the umask (acl(5)): the backing
// file system then derives the mode from both, and it stays as made.
// Without one the umask applies (the kernel applied it already unless
// the mount negotiated FUSE_DONT_MASK, and applying it twice changes
// nothing).
func (f *FS) createMode(pp string, mode uint32, c Caller) (uint32, bool) {
	if !f.noACL.Load() {
		err := f.entryName(pp, func(name string) error {
			_, err := unix.Lgetxattr(name, aclDefault, nil)
			return err
		})
		switch {
		case err == nil:
			return mode, true
		case errors.Is(err, unix.ENOTSUP):
			f.noACL.Store(true)
		}
	}
	return mode &^ (c.Umask & 0o777), false
}

// aclChanged notes that directory n's default ACL changed in the open
// batch.
func (f *FS) aclChanged(n *Node) { n.aclBatch.Store(f.batch.Load() + 1) }

// staleDefaultACL reports whether a backup may hold another default ACL
// on parent than the primary does now, at the point of the batch where a
// create in it is applied: the change came earlier in the open batch, and
// attribute ops are applied after the namespace ops. A new entry then
// records which inheritable ACLs it lacks, too.
func (f *FS) staleDefaultACL(parent *Node) bool {
	return !f.noACL.Load() && parent.aclBatch.Load() == f.batch.Load()+1
}

// inheritedACLs reads the ACLs the backing file system gave a new entry
// from its parent's default ACL, as setxattr ops to record after its
// create. The inheritance happens inside the backing file system, so no op
// says it; a backup that created the file before its parent's default ACL
// reached it (a batch puts namespace ops before attribute ops) would hold
// the file without them. Recorded explicitly, the ACLs are the primary's
// whatever the order the backup applies in. p is its path. With
// removeMissing, an ACL the entry lacks is recorded as removed: the
// backup, whose parent still had the default ACL the batch removed later,
// gave the entry one (staleDefaultACL). A backing file system without
// ACLs has none.
func (f *FS) inheritedACLs(kind journal.Kind, p string, removeMissing bool) ([]journal.Op, error) {
	if kind == journal.KindSymlink || f.noACL.Load() {
		return nil, nil
	}
	names := []string{aclAccess}
	if kind == journal.KindMkdir {
		names = append(names, aclDefault)
	}
	var ops []journal.Op
	for _, name := range names {
		var value []byte
		err := f.entryName(p, func(entry string) (err error) {
			value, err = xattr.Get(entry, name)
			return err
		})
		switch {
		case errors.Is(err, unix.ENOTSUP):
			f.noACL.Store(true)
			return nil, nil
		case errors.Is(err, unix.ENODATA):
			if removeMissing {
				ops = append(ops, journal.Op{Kind: journal.KindRemovexattr, Name: name})
			}
			continue
		case err != nil:
			return nil, err
		}
		ops = append(ops, journal.Op{Kind: journal.KindSetxattr, Name: name, Data: value})
	}
	return ops, nil
}
