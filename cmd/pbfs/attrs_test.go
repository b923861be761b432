package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
)

// userACL grants uid rwx besides the usual owner, group and other entries.
func userACL(uid uint32) []byte {
	return fstest.ACL(fstest.ACLUserObj, 7, fstest.ACLNoID, fstest.ACLUser, 7, uid, fstest.ACLGroupObj, 5, fstest.ACLNoID,
		fstest.ACLMask, 7, fstest.ACLNoID, fstest.ACLOther, 5, fstest.ACLNoID)
}

// setACLs gives the volume's root a user xattr, a mode and an old mtime,
// and a directory d a default ACL.
func setACLs(t *testing.T, vol string) {
	if _, err := unix.Getxattr(vol, "system.posix_acl_access", nil); errors.Is(err, unix.ENOTSUP) {
		t.Skip("the temporary directory's file system keeps no POSIX ACLs")
	}
	must(t, unix.Setxattr(vol, "user.root", []byte("on the root"), 0))
	must(t, os.Mkdir(filepath.Join(vol, "d"), 0o755))
	must(t, unix.Setxattr(filepath.Join(vol, "d"), "system.posix_acl_default", userACL(1234), 0))
	must(t, unix.Setxattr(vol, "system.posix_acl_access", userACL(4321), 0))
}

// The volume's root and inherited ACLs replicate like everything else.
// A setxattr on the root stalled every backup (EPERM), and a file made in
// a directory whose default ACL was set in the same batch reached the
// backup without the ACL it inherited on the primary: a batch applies
// namespace ops before attribute ops, so the backup created the file
// before its parent had the default ACL.
func TestRootAndInheritedACLsReplicate(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	setACLs(t, c.Vol)
	must(t, os.WriteFile(filepath.Join(c.Vol, "d", "f"), []byte("inherits"), 0o640))
	must(t, os.Mkdir(filepath.Join(c.Vol, "d", "sub"), 0o750))
	must(t, unix.Mkfifo(filepath.Join(c.Vol, "d", "fifo"), 0o600))
	must(t, os.Chmod(c.Vol, 0o1777))
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	must(t, os.Chtimes(c.Vol, old, old))
	buf := make([]byte, 256)
	if _, err := unix.Getxattr(filepath.Join(c.Vol, "d", "sub"), "system.posix_acl_default", buf); err != nil {
		t.Fatalf("the primary's backing file system did not inherit the default ACL: %v", err)
	}
	c.RequireConverged()
	if fi, err := os.Stat(c.Backups[0].Vol); err != nil || !fi.ModTime().Equal(old) {
		t.Fatalf("the backup's root: %v %v", fi.ModTime(), err)
	}
}

// A resync carries the root's attributes and every ACL.
func TestResyncCarriesRootAndACLs(t *testing.T) {
	c := fstest.NewClusterCopy(t, 1, func(vol string) {
		setACLs(t, vol)
		must(t, os.WriteFile(filepath.Join(vol, "d", "f"), []byte("inherits"), 0o640))
		must(t, os.Chmod(vol, 0o1750))
	}, false)
	c.RequireConverged()
}
