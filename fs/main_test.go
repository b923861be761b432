package fs_test

import (
	"os"
	"testing"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// TestMain removes the binaries the tests built once they have run.
func TestMain(m *testing.M) { os.Exit(fstest.Main(m)) }

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
