package fstest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pbfs/pbfs/mount"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// teardownChild is set in the test binary that TestTeardownCatches runs
// to break one invariant behind the helpers' backs.
const teardownChild = "PBFS_TEARDOWN_CHILD"

// The teardown checks fail a test whose volume, replay or backup went
// wrong, even though the test itself asserted nothing, and the failing
// test keeps its directories.
func TestTeardownCatches(t *testing.T) {
	switch os.Getenv(teardownChild) {
	case "replay":
		// The starting state differs from what the volume started as:
		// the replay cannot equal the volume.
		e := Setup(t, mount.Config{}, nil)
		os.WriteFile(filepath.Join(e.Vol, "a"), []byte("through the mount"), 0o644)
		os.WriteFile(filepath.Join(e.Start, "stray"), []byte("never journaled"), 0o644)
		return
	case "backup":
		// A file written into a backup's copy behind its back.
		c := NewCluster(t, 1, nil)
		os.WriteFile(filepath.Join(c.Vol, "a"), []byte("through the mount"), 0o644)
		// After the backup's first resync, which would remove the stray.
		c.WaitApplied(c.Barrier())
		os.WriteFile(filepath.Join(c.Backups[0].Vol, "stray"), []byte("not the primary's"), 0o644)
		return
	case "clean":
		c := NewCluster(t, 1, nil)
		os.WriteFile(filepath.Join(c.Vol, "a"), []byte("through the mount"), 0o644)
		return
	case "":
	default:
		t.Skip("another child")
	}
	RequireFUSE(t)
	for _, tc := range []struct{ mode, want string }{
		{"replay", "replica vs primary"},
		{"backup", "backup 0"},
		{"clean", ""},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^TestTeardownCatches$", "-test.v")
			cmd.Env = append(os.Environ(), teardownChild+"="+tc.mode)
			out, err := cmd.CombinedOutput()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("a clean test failed its teardown: %v\n%s", err, out)
				}
				return
			}
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("teardown did not catch the broken invariant (%v); want %q in:\n%s", err, tc.want, out)
			}
			m := regexp.MustCompile(`kept the test's directories \(journals, volumes, copies\) in (\S+)`).FindSubmatch(out)
			if m == nil {
				t.Fatalf("the failing test did not say where it kept its directories:\n%s", out)
			}
			dir := string(m[1])
			defer os.RemoveAll(dir)
			if ents, err := os.ReadDir(dir); err != nil || len(ents) == 0 {
				t.Fatalf("kept directory %s: %v, %d entries", dir, err, len(ents))
			}
			if Mounted(filepath.Join(dir, "vol")) {
				t.Fatalf("the kept directory is still mounted")
			}
		})
	}
}
