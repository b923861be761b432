package capture_test

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/capture"
)

// testClasses: f1 and f4 anywhere (the seeded f0 and f3 have hard links
// elsewhere) and d1/f5 are local-only, and so is
// everything below run/; files named *.log fsync replicated, *.both both.
func testClasses(p string) capture.Class {
	base := path.Base(p)
	switch {
	case base == "f1" || base == "f4" || p == "d1/f5" || p == "run" || strings.HasPrefix(p, "run/"):
		return capture.Class{LocalOnly: true}
	case strings.HasSuffix(p, ".log"):
		return capture.Class{Fsync: capture.FsyncReplicated}
	case strings.HasSuffix(p, ".both"):
		return capture.Class{Fsync: capture.FsyncBoth}
	}
	return capture.Class{}
}

// The randomized workload with local-only paths: none of them is ever
// journaled, and the replay equals the volume everywhere else (directory
// mtimes included: a local-only create still changes its parent).
func TestLocalOnlyNeverShipped(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { driveSeed(t, seed, testClasses) })
	}
}

func newClassified(t *testing.T) (*kernel, string, *sealer) {
	t.Helper()
	vol := t.TempDir()
	rootFd, err := unix.Open(vol, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := capture.New(rootFd, capture.Options{Capture: true, Classify: testClasses})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &kernel{fs: f, caller: capture.Caller{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}}, vol, &sealer{fs: f}
}

func (k *kernel) mkdir(t *testing.T, p string) {
	t.Helper()
	dir, name, err := k.parent(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.fs.Mkdir(dir, name, 0o755, k.caller); err != nil {
		t.Fatalf("mkdir %s: %v", p, err)
	}
}

func (k *kernel) rename(p, q string) error {
	op, on, err := k.parent(p)
	if err != nil {
		return err
	}
	np, nn, err := k.parent(q)
	if err != nil {
		return err
	}
	return k.fs.Rename(op, on, np, nn, 0)
}

// Renames and links between a local-only and a replicated path fail with
// EXDEV, as between two file systems, and change nothing; so does a
// directory rename that would move something inside it across. Within a
// class they work, and local-only ones are not journaled.
func TestCrossClassRenameRefused(t *testing.T) {
	k, vol, s := newClassified(t)
	k.mkdir(t, "run")
	k.mkdir(t, "d")
	k.writeAt("run/x.pid", unix.O_WRONLY, 0, []byte("123"), true)
	k.writeAt("d/f1", unix.O_WRONLY, 0, []byte("local"), true) // local by name
	k.writeAt("d/a", unix.O_WRONLY, 0, []byte("replicated"), true)
	for _, c := range [][2]string{{"run/x.pid", "d/x.pid"}, {"d/a", "run/a"}, {"d/f1", "d/g"}, {"d/a", "d/f4"}} {
		if err := k.rename(c[0], c[1]); !errors.Is(err, unix.EXDEV) {
			t.Errorf("rename %s -> %s: %v, want EXDEV", c[0], c[1], err)
		}
	}
	n, _ := k.walk("d/a")
	np, _ := k.walk("run")
	if _, err := k.fs.Link(n, np, "a"); !errors.Is(err, unix.EXDEV) {
		t.Errorf("link d/a -> run/a: %v, want EXDEV", err)
	}
	// d holds f1, local-only by name wherever it is: d may move. A
	// directory holding f5 may not become d1 (d1/f5 is local-only).
	k.mkdir(t, "e")
	k.writeAt("e/f5", unix.O_WRONLY, 0, []byte("x"), true)
	if err := k.rename("e", "d1"); !errors.Is(err, unix.EXDEV) {
		t.Errorf("rename e -> d1 (e/f5 would become local-only): %v, want EXDEV", err)
	}
	if err := k.rename("d", "d2"); err != nil {
		t.Errorf("rename d -> d2: %v", err)
	}
	if err := k.rename("run/x.pid", "run/y.pid"); err != nil {
		t.Errorf("rename within local-only: %v", err)
	}
	for _, p := range []string{"run/y.pid", "d2/f1", "d2/a", "e/f5"} {
		if _, err := os.Stat(filepath.Join(vol, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	s.seal(t)
	var journaled []string
	for _, b := range s.batches {
		for _, op := range b.Ops {
			journaled = append(journaled, op.Kind.String()+" "+op.Path)
			if k.fs.Local(op.Path) || op.Path2 != "" && k.fs.Local(op.Path2) {
				t.Errorf("journaled a local-only op: %s %s %s", op.Kind, op.Path, op.Path2)
			}
		}
	}
	all := strings.Join(journaled, "\n")
	for _, want := range []string{"create d/a", "rename d", "create e/f5"} {
		if !strings.Contains(all, want) {
			t.Errorf("journal lacks %q:\n%s", want, all)
		}
	}
}

// A fsync's policy follows the file's current path; local-only files
// always sync locally.
func TestFsyncPolicyByPath(t *testing.T) {
	k, _, _ := newClassified(t)
	k.mkdir(t, "run")
	for p, want := range map[string]capture.FsyncPolicy{
		"redo.log": capture.FsyncReplicated, "data.both": capture.FsyncBoth, "table": capture.FsyncLocal, "run/x.log": capture.FsyncLocal,
	} {
		k.writeAt(p, unix.O_WRONLY, 0, []byte("x"), true)
		n, err := k.walk(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := k.fs.FsyncPolicy(n); got != want {
			t.Errorf("%s: policy %v, want %v", p, got, want)
		}
	}
	if err := k.rename("table", "table.log"); err != nil {
		t.Fatal(err)
	}
	n, _ := k.walk("table.log")
	if got := k.fs.FsyncPolicy(n); got != capture.FsyncReplicated {
		t.Errorf("renamed to table.log: policy %v, want replicated", got)
	}
}
