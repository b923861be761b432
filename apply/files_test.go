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
	dir := t.TempDir()
	a, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
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
