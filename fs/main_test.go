package fs_test

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// TestMain removes the binaries the tests built once they have run. Run
// with PBFS_TEST_SET_ACL=path, the binary instead gives path an access ACL
// and exits, as the caller it runs as (TestPosixACLsMatchTheKernel).
func TestMain(m *testing.M) {
	if p := os.Getenv("PBFS_TEST_SET_ACL"); p != "" {
		acl := fstest.ACL(fstest.ACLUserObj, 7, fstest.ACLNoID, fstest.ACLUser, 4, 1234, fstest.ACLGroupObj, 5, fstest.ACLNoID,
			fstest.ACLMask, 5, fstest.ACLNoID, fstest.ACLOther, 5, fstest.ACLNoID)
		if err := unix.Setxattr(p, "system.posix_acl_access", acl, 0); err != nil {
			fmt.Fprintln(os.Stderr, "set ACL:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(fstest.Main(m))
}

// mountMatrix is the set of options the regression tests run under, as
// gocryptfs runs its suite under each of its modes: every option changes
// the capture or request path, and a fix must hold under each.
var mountMatrix = []struct {
	name  string
	apply func(*mount.Config)
}{
	{"default", func(*mount.Config) {}},
	{"write-diff", func(c *mount.Config) { c.WriteDiff = true }},
	{"no-xattrs", func(c *mount.Config) { c.NoXattrs = true }},
}

// eachMount runs test as a subtest under each mount option, on top of cfg.
func eachMount(t *testing.T, cfg mount.Config, test func(t *testing.T, cfg mount.Config)) {
	for _, o := range mountMatrix {
		c := cfg
		o.apply(&c)
		t.Run(o.name, func(t *testing.T) { test(t, c) })
	}
}
