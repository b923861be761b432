package apply

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pbfs/pbfs/journal"
)

// TestKeptFilesFollowNames: files kept open between batches never take a
// write meant for whatever a name stands for after a namespace op, or
// after a change from outside the applier that Forget announces.
func TestKeptFilesFollowNames(t *testing.T) {
	dir, a := newTarget(t)
	w := func(p, s string, off uint64) journal.Op {
		return journal.Op{Kind: journal.KindWrite, Path: p, Offset: off, Data: []byte(s)}
	}
	for i, ops := range [][]journal.Op{
		{{Kind: journal.KindCreate, Path: "f", Mode: 0o644}, w("f", "old", 0)},
		{{Kind: journal.KindCreate, Path: "g", Mode: 0o644}, w("g", "new", 0)},
		{{Kind: journal.KindRename, Path: "g", Path2: "f"}},
		{w("f", "N", 0)},
	} {
		if err := a.ApplyUnsynced(&journal.Batch{Seq: uint64(i + 1), Ops: ops}); err != nil {
			t.Fatal(err)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "f")); string(data) != "New" {
		t.Fatalf("f after a rename over it and a write: %q, want %q", data, "New")
	}
	// From outside: f replaced behind the applier's back, then Forget.
	os.WriteFile(filepath.Join(dir, "h"), []byte("outside"), 0o644)
	os.Rename(filepath.Join(dir, "h"), filepath.Join(dir, "f"))
	a.Forget()
	if err := a.ApplyUnsynced(&journal.Batch{Seq: 5, Ops: []journal.Op{w("f", "O", 0)}}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "f")); string(data) != "Outside" {
		t.Fatalf("f after an outside rename, Forget and a write: %q, want %q", data, "Outside")
	}
}

// TestKeptDirectoriesFollowNames: a directory kept open between batches
// stays kept while only names inside it change (a service storing each
// request as a file renamed into place), and never takes an entry meant
// for whatever its path stands for after that path, one of its ancestors,
// or a symlink on the way to it changed.
func TestKeptDirectoriesFollowNames(t *testing.T) {
	dir, a := newTarget(t)
	seq := uint64(0)
	apply := func(ops ...journal.Op) {
		t.Helper()
		seq++
		if err := a.ApplyUnsynced(&journal.Batch{Seq: seq, Ops: ops}); err != nil {
			t.Fatal(err)
		}
	}
	create := func(p string) journal.Op { return journal.Op{Kind: journal.KindCreate, Path: p, Mode: 0o644} }
	mkdir := func(p string) journal.Op { return journal.Op{Kind: journal.KindMkdir, Path: p, Mode: 0o755} }
	rename := func(p, q string) journal.Op { return journal.Op{Kind: journal.KindRename, Path: p, Path2: q} }
	kept := func(p string) *os.File {
		a.files.mu.Lock()
		defer a.files.mu.Unlock()
		return a.files.files[keptKey{keptDir, p}].f
	}

	apply(mkdir("kv"), create("kv/.tmp-1"), rename("kv/.tmp-1", "kv/k1"))
	kv := kept("kv")
	apply(create("kv/.tmp-2"), rename("kv/.tmp-2", "kv/k1"), journal.Op{Kind: journal.KindUnlink, Path: "kv/k1"})
	if kv == nil || kept("kv") != kv {
		t.Fatal("kv was reopened (or never kept) though only names inside it changed")
	}

	// The kept directory's own name moves: a new directory takes it.
	apply(mkdir("a"), mkdir("a/b"), create("a/b/f"), rename("a", "c"), mkdir("a"), mkdir("a/b"), create("a/b/g"))
	assertExists(t, dir, "a/b/g", true)
	assertExists(t, dir, "c/b/g", false)

	// Through a symlink: s/e is d/e, and d/e moves. No name on the path
	// s/e changed, so only not keeping s/e keeps g out of d/e2.
	apply(mkdir("d"), mkdir("d/e"), journal.Op{Kind: journal.KindSymlink, Path: "s", Target: "d"}, create("s/e/f"))
	apply(rename("d/e", "d/e2"), mkdir("d/e"), create("s/e/g"))
	assertExists(t, dir, "d/e/g", true)
	assertExists(t, dir, "d/e2/g", false)
}

func assertExists(t *testing.T, dir, p string, want bool) {
	t.Helper()
	_, err := os.Lstat(filepath.Join(dir, p))
	if got := err == nil; got != want {
		t.Fatalf("%s exists: %v, want %v (%v)", p, got, want, err)
	}
}

// newTarget returns an empty target directory and its applier, closed at
// the test's end.
func newTarget(t *testing.T) (string, *Applier) {
	t.Helper()
	dir := t.TempDir()
	a, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return dir, a
}
