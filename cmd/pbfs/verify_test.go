package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/fstest"
)

// pbfs verify, online: identical copies pass (local-only files on the
// primary are not missed); a copy altered behind pbfs's back is named,
// path and backup, and so is a file removed from one and one added.
func TestVerifyNamesDifferences(t *testing.T) {
	c := fstest.NewCluster(t, 2, nil, "--local-only", "*.pid")
	must(t, os.MkdirAll(filepath.Join(c.Vol, "d/e"), 0o755))
	for _, f := range []string{"a", "d/b", "d/e/c", "host.pid"} {
		must(t, os.WriteFile(filepath.Join(c.Vol, f), []byte(strings.Repeat(f, 1000)), 0o644))
	}
	must(t, os.Symlink("d/b", filepath.Join(c.Vol, "link")))
	// A 1 TiB sparse file: its holes are not read (hashing every byte took
	// verify past its timeout), yet a byte changed in one is found.
	sparse := filepath.Join(c.Vol, "sparse")
	must(t, os.WriteFile(sparse, []byte("head"), 0o644))
	writeAt(t, sparse, 1<<40-4, "tail")
	c.WaitApplied(c.Barrier())
	out, code := run(t, "verify", "--journal", c.Jdir, "--token", fstest.TestToken)
	if code != 0 || strings.Count(out, "identical") != 2 {
		t.Fatalf("verify of equal copies: exit %d:\n%s", code, out)
	}
	b0, b1 := c.Backups[0], c.Backups[1]
	must(t, os.WriteFile(filepath.Join(b1.Vol, "d/e/c"), []byte("altered behind pbfs's back"), 0o644))
	writeAt(t, filepath.Join(b1.Vol, "sparse"), 1<<39, "x")
	must(t, os.Remove(filepath.Join(b0.Vol, "a")))
	must(t, os.WriteFile(filepath.Join(b0.Vol, "stray"), nil, 0o644))
	// Extended attributes and the root are the volume's too.
	must(t, unix.Lsetxattr(filepath.Join(b1.Vol, "link"), "trusted.behind", []byte("pbfs's back"), 0))
	must(t, os.Chmod(b0.Vol, 0o700))
	// No token: the mount, which holds it, fetches the backups' manifests.
	t.Setenv("PBFS_TOKEN", "")
	out, code = run(t, "verify", "--journal", c.Jdir)
	if code != 1 {
		t.Fatalf("verify of altered copies: exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		b1.Addr + ": 3 of", "  d/e/c: size", "  sparse: contents differ", "  link: extended attributes (or ACLs) differ",
		b0.Addr + ": 3 of", "  a: missing", "  stray: not on the primary", "  .: mode 700, want 755",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verify output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "host.pid") {
		t.Errorf("a local-only file was compared:\n%s", out)
	}
	// A file too large to hash with the service's writes paused is not
	// compared again: not verified, never called equal. The sparse file
	// costs only its data, and is still compared.
	must(t, os.WriteFile(filepath.Join(c.Vol, "big"), bytes.Repeat([]byte("b"), 64<<10), 0o644))
	c.WaitApplied(c.Barrier())
	must(t, os.WriteFile(filepath.Join(b1.Vol, "big"), bytes.Repeat([]byte("B"), 64<<10), 0o644))
	out, code = run(t, "verify", "--journal", c.Jdir, "--token", fstest.TestToken, "--max-paused-file", "10000")
	for _, want := range []string{"  big: not verified: it differed as first read", "  sparse: contents differ", "  d/e/c: size"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("verify --max-paused-file 10000: exit %d, lacks %q:\n%s", code, want, out)
		}
	}
}

// Under the randomized workload, verify names nothing that is not wrong:
// the paths the service changed while it compared are compared again
// exactly, as of one batch, and found equal. Several runs, so that some
// have paths to compare again.
func TestVerifyUnderLoad(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	again := 0
	c.Workload(7, 4000, func() {
		for i := 0; i < 5; i++ {
			out, code := run(t, "verify", "--journal", c.Jdir, "--token", fstest.TestToken)
			if code != 0 || !strings.Contains(out, "identical") {
				t.Fatalf("verify under load, run %d: exit %d:\n%s", i, code, out)
			}
			if strings.Contains(out, "compared again as of seq") {
				again++
			}
		}
	})
	if again == 0 {
		t.Errorf("no run had a path to compare again: the test did not exercise the exact round")
	}
	t.Logf("%d of 5 runs compared paths again", again)
	c.RequireConverged()
}

// Exact rounds hold at most the budget, in path order; a larger file has a
// round of its own.
func TestVerifyRounds(t *testing.T) {
	got := rounds(map[string]int64{"a": 6, "b": 5, "c": 20, "d": 1, "e": 9}, 10)
	want := [][]string{{"a"}, {"b"}, {"c"}, {"d", "e"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rounds = %v, want %v", got, want)
	}
	many := map[string]int64{}
	for i := range control.MaxComparePaths + 1 {
		many[fmt.Sprint(i)] = 0
	}
	if got := rounds(many, 10); len(got) != 2 || len(got[0]) != control.MaxComparePaths {
		t.Fatalf("%d empty files made %d rounds", len(many), len(got))
	}
}

// writeAt writes s into the file at p at offset off.
func writeAt(t *testing.T, p string, off int64, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	defer f.Close()
	_, err = f.WriteAt([]byte(s), off)
	must(t, err)
}

// verify --repair resyncs the backups it found to differ, and only
// those, waits, and verifies again; resync --backup names one backup, and
// refuses an address that is none of the primary's.
func TestVerifyRepair(t *testing.T) {
	c := fstest.NewCluster(t, 2, nil)
	must(t, os.WriteFile(filepath.Join(c.Vol, "f"), []byte("the primary's"), 0o644))
	c.RequireConverged()
	b0, b1 := c.Backups[0], c.Backups[1]
	must(t, os.WriteFile(filepath.Join(b1.Vol, "f"), []byte("altered"), 0o644))
	must(t, os.WriteFile(filepath.Join(b1.Vol, "stray"), nil, 0o644))
	must(t, os.Chmod(b1.Vol, 0o700))
	out, code := run(t, "verify", "--journal", c.Jdir, "--token", fstest.TestToken, "--repair")
	if code != 0 || !strings.Contains(out, "verify: resyncing "+b1.Addr+"\n") || !strings.Contains(out, "after the resync:") ||
		strings.Count(out, "identical") != 3 || !strings.Contains(out, "  f: ") {
		t.Fatalf("verify --repair: exit %d:\n%s", code, out)
	}
	resyncs := func(addr string) int {
		n := 0
		for _, line := range strings.Split(c.Primary.Out.String(), "\n") {
			if strings.Contains(line, "resync done") && strings.Contains(line, "backup="+addr+" ") {
				n++
			}
		}
		return n
	}
	if n0, n1 := resyncs(b0.Addr), resyncs(b1.Addr); n0 != 1 || n1 != 2 {
		t.Errorf("resyncs of %s and %s: %d and %d, want its first only and one more:\n%s", b0.Addr, b1.Addr, n0, n1, c.Primary.Out)
	}
	c.RequireConverged()
	out, code = run(t, "resync", "--journal", c.Jdir, "--backup", "127.0.0.1:1")
	if code != 1 || !strings.Contains(out, "not a backup of this primary") {
		t.Fatalf("resync --backup of an unknown address: exit %d:\n%s", code, out)
	}
	must(t, os.WriteFile(filepath.Join(b0.Vol, "f"), []byte("altered again"), 0o644))
	out, code = run(t, "resync", "--journal", c.Jdir, "--backup", b0.Addr, "--wait")
	if code != 0 {
		t.Fatalf("resync --backup %s: exit %d:\n%s", b0.Addr, code, out)
	}
	c.RequireConverged()
}
