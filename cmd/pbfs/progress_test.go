package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pbfs/pbfs/internal/fstest"
)

// Long operations report progress; not on a terminal, as plain lines
// with a rate and an ETA. pbfs resync --wait follows a resync to its end.
func TestProgressLines(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	for i := 0; i < 20; i++ {
		must(t, os.WriteFile(filepath.Join(c.Vol, fmt.Sprint("f", i)), []byte(strings.Repeat("x", 1000*i)), 0o644))
		c.Barrier()
	}
	for _, args := range [][]string{
		{"journal", "verify", "--journal", c.Jdir},
		{"journal", "replay", "--journal", c.Jdir, t.TempDir()},
	} {
		cmd := exec.Command(pbfsBin, args...)
		cmd.Env = append(os.Environ(), "PBFS_PROGRESS_EVERY=1ns")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), " batches (") || !strings.Contains(string(out), "batches/s") {
			t.Errorf("pbfs %s: %v\n%s", strings.Join(args[:2], " "), err, out)
		}
	}
	out, code := run(t, "resync", "--journal", c.Jdir, "--wait", "--timeout", "60s")
	if code != 0 || !strings.Contains(out, "every backup is resynced") {
		t.Fatalf("resync --wait: exit %d:\n%s", code, out)
	}
	c.RequireConverged()
}
