package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/pbfs/pbfs/internal/fstest"
)

// Outside stress tools, run against a primary with two backups: xfstests'
// fsstress and fsx (DEVELOPERS.md says how to build them). They are not in
// Debian and CI cannot download them, so these tests run where the tools
// are installed (PBFS_FSSTRESS, PBFS_FSX, or on the PATH) and are skipped
// elsewhere; CI relies on the project's own randomized tests, which do
// what these tools found wrong.

// scaled multiplies n by PBFS_OUTSIDE_SCALE (default 1), for longer runs.
func scaled(n int) string {
	k := 1
	fmt.Sscan(os.Getenv("PBFS_OUTSIDE_SCALE"), &k)
	return fmt.Sprint(n * max(k, 1))
}

// outsideTool finds a tool by its environment variable or on the PATH.
func outsideTool(t *testing.T, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	t.Skipf("%s not found (set %s): DEVELOPERS.md says how to build it", name, env)
	return ""
}

// requireCopiesEqual converges the cluster and replays the primary's
// journal onto an empty directory: all three must equal the primary.
func requireCopiesEqual(t *testing.T, c *fstest.Cluster) {
	t.Helper()
	c.RequireConverged()
	target := filepath.Join(c.Dir, "replay")
	must(t, os.Mkdir(target, 0o755))
	if out, code := run(t, "journal", "replay", "--journal", c.Jdir, target); code != 0 {
		t.Fatalf("replay: %s", out)
	}
	fstest.RequireEqual(t, fstest.Snapshot(t, c.Vol), fstest.Snapshot(t, target), "journal replay vs primary")
}

func runTool(t *testing.T, dir string, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out)
	}
}

// TestFsstress: fsstress with 4 processes, several seeds, renameat2 with
// RENAME_WHITEOUT and mknod included; both backups and the replay end
// equal to the primary.
func TestFsstress(t *testing.T) {
	tool := outsideTool(t, "PBFS_FSSTRESS", "fsstress")
	for seed := 1; seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			c := fstest.NewClusterCopy(t, 2, nil, false)
			runTool(t, c.Vol, tool, "-d", filepath.Join(c.Vol, "stress"), "-n", scaled(2000), "-p", "4", "-s", fmt.Sprint(seed))
			requireCopiesEqual(t, c)
		})
	}
}

// TestFsx: fsx, buffered and O_DIRECT, on one file; both backups and the
// replay end equal to the primary.
func TestFsx(t *testing.T) {
	tool := outsideTool(t, "PBFS_FSX", "fsx")
	c := fstest.NewClusterCopy(t, 2, nil, false)
	runTool(t, c.Vol, tool, "-q", "-N", scaled(20000), "-S", "7", filepath.Join(c.Vol, "fsx-buffered"))
	runTool(t, c.Vol, tool, "-q", "-Z", "-N", scaled(6000), "-S", "8", filepath.Join(c.Vol, "fsx-direct"))
	requireCopiesEqual(t, c)
}
