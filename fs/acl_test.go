package fs_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

const (
	tagUserObj, tagUser, tagGroupObj, tagMask, tagOther = fstest.ACLUserObj, fstest.ACLUser, fstest.ACLGroupObj, fstest.ACLMask, fstest.ACLOther
	anyID                                               = fstest.ACLNoID
)

var posixACL = fstest.ACL

// TestPosixACLsMatchTheKernel: through a mount other users reach, access
// is checked against the files' ACLs, and a new entry in a directory with
// a default ACL gets the mode and ACL a local file system gives it (the
// default ACL replaces the umask). The test runs the same steps on a
// plain directory first. pbfs checked the mode bits alone, and chmod'ed
// every new entry to the umasked mode, before.
func TestPosixACLsMatchTheKernel(t *testing.T) {
	seed := func(t *testing.T, dir string) {
		must(t, os.Chmod(dir, 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "denied"), []byte("secret"), 0o644))
		must(t, unix.Setxattr(filepath.Join(dir, "denied"), "system.posix_acl_access",
			posixACL(tagUserObj, 6, anyID, tagUser, 0, 1000, tagGroupObj, 4, anyID, tagMask, 4, anyID, tagOther, 4, anyID), 0))
		must(t, os.WriteFile(filepath.Join(dir, "granted"), []byte("shared"), 0o600))
		must(t, unix.Setxattr(filepath.Join(dir, "granted"), "system.posix_acl_access",
			posixACL(tagUserObj, 6, anyID, tagUser, 4, 1000, tagGroupObj, 0, anyID, tagMask, 4, anyID, tagOther, 0, anyID), 0))
		for name, def := range map[string][]byte{
			"private": posixACL(tagUserObj, 7, anyID, tagGroupObj, 5, anyID, tagOther, 0, anyID),
			"shared":  posixACL(tagUserObj, 7, anyID, tagUser, 7, 1000, tagGroupObj, 7, anyID, tagMask, 7, anyID, tagOther, 5, anyID),
		} {
			must(t, os.Mkdir(filepath.Join(dir, name), 0o755))
			must(t, unix.Setxattr(filepath.Join(dir, name), "system.posix_acl_default", def, 0))
		}
		// Owned by uid 1000, who is not in its group: an ACL it sets
		// drops setgid (the kernel asks pbfs, FUSE_SETXATTR_ACL_KILL_SGID).
		must(t, os.WriteFile(filepath.Join(dir, "setgid"), nil, 0o644))
		must(t, os.Chown(filepath.Join(dir, "setgid"), 1000, 0))
		must(t, os.Chmod(filepath.Join(dir, "setgid"), 0o2755|os.ModeSetgid))
	}
	steps := []struct {
		name  string
		user  bool // as uid 1000, else as root
		shell string
	}{
		{"read denied", true, "cat denied"},
		{"read granted", true, "cat granted"},
		{"private file", false, "umask 022; echo x > private/f"},
		{"private dir", false, "umask 022; mkdir private/d"},
		{"private fifo", false, "umask 022; mkfifo private/p"},
		{"shared file, umask 077", false, "umask 077; echo x > shared/f"},
		{"shared dir, umask 077", false, "umask 077; mkdir shared/d"},
		{"plain file, umask 027", false, "umask 027; echo x > plain"},
		{"user writes shared", true, "echo y > shared/mine"},
		{"owner sets an ACL on its setgid file", true, `PBFS_TEST_SET_ACL=setgid "$PBFS_TEST_BIN"`},
	}
	// The test binary sets the ACL (setfacl may be missing): a copy other
	// users can run.
	bin := filepath.Join(t.TempDir(), "fs.test")
	self, err := os.ReadFile(os.Args[0])
	must(t, err)
	must(t, os.WriteFile(bin, self, 0o755))
	openParents(t, filepath.Dir(bin))
	run := func(t *testing.T, dir string) []string {
		var out []string
		for _, s := range steps {
			cmd := exec.Command("/bin/sh", "-c", s.shell)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "PBFS_TEST_BIN="+bin)
			if s.user {
				asUser1000(cmd)
			}
			o, err := cmd.CombinedOutput()
			res := strings.ReplaceAll(string(o), dir, "DIR")
			if err != nil {
				res += " (" + err.Error() + ")"
			}
			out = append(out, s.name+": "+res)
		}
		for _, p := range []string{"private/f", "private/d", "private/p", "shared/f", "shared/d", "plain", "shared/mine", "setgid"} {
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(dir, p), &st); err != nil {
				out = append(out, p+": "+err.Error())
				continue
			}
			out = append(out, fmt.Sprintf("%s: mode %04o acls %s", p, st.Mode&0o7777, aclsOf(filepath.Join(dir, p))))
		}
		return out
	}
	plain := t.TempDir()
	openParents(t, plain)
	if _, err := unix.Getxattr(plain, "system.posix_acl_access", nil); errors.Is(err, unix.ENOTSUP) {
		t.Skip("the temporary directory's file system keeps no POSIX ACLs")
	}
	seed(t, plain)
	want := run(t, plain)
	e := fstest.Setup(t, mount.Config{AllowOther: true}, func(vol string) { seed(t, vol) })
	openParents(t, e.Dir)
	got := run(t, e.Vol)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("through pbfs: %q\n          local: %q", got[i], want[i])
		}
	}
	e.CheckReplay()
}

// aclsOf lists p's ACL attributes: their names and entry counts.
func aclsOf(p string) string {
	var out []string
	for _, name := range []string{"system.posix_acl_access", "system.posix_acl_default"} {
		buf := make([]byte, 1024)
		if n, err := unix.Lgetxattr(p, name, buf); err == nil {
			out = append(out, fmt.Sprintf("%s=%d", name[len("system.posix_acl_"):], n/8))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// TestDefaultACLRemovedThenCreate: a directory loses its default ACL
// (setfacl -k), and entries are made in it in the same batch. A batch
// applies namespace ops before attribute ops, so the backup made them
// while the directory still had its old default ACL, and they inherited
// it: the backup's new file and directory held ACLs the primary's lacked.
func TestDefaultACLRemovedThenCreate(t *testing.T) {
	def := posixACL(tagUserObj, 7, anyID, tagUser, 7, 1000, tagGroupObj, 5, anyID, tagMask, 7, anyID, tagOther, 5, anyID)
	e := fstest.Setup(t, mount.Config{AllowOther: true, SealInterval: time.Hour}, func(vol string) {
		must(t, os.Mkdir(filepath.Join(vol, "A"), 0o755))
		must(t, unix.Setxattr(filepath.Join(vol, "A"), "system.posix_acl_default", def, 0))
	})
	if _, err := unix.Getxattr(e.Vol, "system.posix_acl_access", nil); errors.Is(err, unix.ENOTSUP) {
		t.Skip("the volume's file system keeps no POSIX ACLs")
	}
	a := filepath.Join(e.Vol, "A")
	must(t, unix.Removexattr(a, "system.posix_acl_default"))
	must(t, os.Mkdir(filepath.Join(a, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(a, "f"), []byte("x"), 0o644))
	if got := aclsOf(filepath.Join(a, "f")) + aclsOf(filepath.Join(a, "sub")); got != "" {
		t.Fatalf("the primary's new entries hold ACLs: %s", got)
	}
	// And back: a default ACL set again, then an entry made, in one batch.
	e.Barrier()
	must(t, unix.Setxattr(a, "system.posix_acl_default", def, 0))
	must(t, os.WriteFile(filepath.Join(a, "g"), []byte("y"), 0o644))
	e.CheckReplay()
}
