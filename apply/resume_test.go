package apply

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/pbfs/pbfs/journal"
)

// resumeBatch reuses names, renames directories and exchanges: a batch
// Redo cannot finish exactly, and Resume must.
func resumeBatch() *journal.Batch {
	return &journal.Batch{Seq: 7, Ops: []journal.Op{
		{Kind: journal.KindCreate, Path: "a", Mode: 0o600},
		{Kind: journal.KindWrite, Path: "a", Data: []byte("first a")},
		{Kind: journal.KindRename, Path: "a", Path2: "b"},
		{Kind: journal.KindCreate, Path: "a", Mode: 0o640},
		{Kind: journal.KindWrite, Path: "a", Data: []byte("second a")},
		{Kind: journal.KindRename, Path: "a", Path2: "b", Flags: 2}, // RENAME_EXCHANGE
		{Kind: journal.KindMkdir, Path: "d", Mode: 0o750},
		{Kind: journal.KindSymlink, Path: "d/s", Target: "../b"},
		{Kind: journal.KindLink, Path: "b", Path2: "d/hard"},
		{Kind: journal.KindRename, Path: "d", Path2: "e"},
		{Kind: journal.KindMkdir, Path: "d", Mode: 0o700},
		{Kind: journal.KindChmod, Path: "e/hard", Mode: 0o604},
		{Kind: journal.KindUnlink, Path: "pre"},
		{Kind: journal.KindCreate, Path: "pre", Mode: 0o644},
		{Kind: journal.KindTruncate, Path: "pre", Size: 3},
		{Kind: journal.KindRmdir, Path: "d"},
		{Kind: journal.KindMknod, Path: "fifo", Mode: syscall.S_IFIFO | 0o620},
		{Kind: journal.KindUnlink, Path: "a"},
	}}
}

// tree describes a directory: type, mode, contents, link target, and which
// names share an inode.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%v uid=%d", fi.Mode(), st.Uid)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		case fi.Mode().IsRegular():
			data, _ := os.ReadFile(p)
			desc += fmt.Sprintf(" %q", data)
			if first, ok := inodes[st.Ino]; ok {
				desc += " same as " + first
			} else {
				inodes[st.Ino] = rel
			}
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func seedResume(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pre"), []byte("pre-existing"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

var errCrash = errors.New("crash")

// TestResumeIsExactAtEveryOp: for every op of a batch that reuses names,
// the applier "crashes" just before the op (mark written, op not run) and
// just after it (op done, next mark never written), and for creates also
// in the middle (entry made, owner and mode not set); Resume from the last
// mark always ends with the tree a whole Apply makes.
func TestResumeIsExactAtEveryOp(t *testing.T) {
	if Redoable(resumeBatch()) {
		t.Fatal("the test batch should be one Redo cannot finish")
	}
	want := func() map[string]string {
		dir := seedResume(t)
		a, _ := New(dir, nil)
		defer a.Close()
		if err := a.Apply(resumeBatch()); err != nil {
			t.Fatal(err)
		}
		return tree(t, dir)
	}()
	for k := range resumeBatch().Ops {
		for _, mode := range []string{"before", "after", "partial"} {
			b := resumeBatch()
			if mode == "partial" && b.Ops[k].Kind != journal.KindCreate {
				continue
			}
			dir := seedResume(t)
			a, err := New(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			var markIndex int
			var markIno uint64
			a.SetMarker(func(seq uint64, i int, ino uint64) error {
				if mode == "after" && i == k+1 {
					return errCrash // op k ran whole; this mark is never written
				}
				markIndex, markIno = i, ino
				if (mode == "before" || mode == "partial") && i == k {
					return errCrash
				}
				return nil
			})
			err = a.Apply(b)
			if k == len(b.Ops)-1 && mode == "after" {
				err = errCrash // the last op: crash before "applied" is recorded
			}
			if !errors.Is(err, errCrash) {
				t.Fatalf("op %d %s: apply: %v", k, mode, err)
			}
			if mode == "partial" {
				// open(O_CREAT) ran, fchown and fchmod did not.
				f, err := os.OpenFile(filepath.Join(dir, b.Ops[k].Path), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
			a.SetMarker(nil)
			if err := a.Resume(b, markIndex, markIno); err != nil {
				t.Fatalf("op %d (%s) %s: resume: %v", k, b.Ops[k].Kind, mode, err)
			}
			if got := tree(t, dir); !reflect.DeepEqual(got, want) {
				t.Fatalf("op %d (%s) %s: resumed tree differs:\n got %v\nwant %v", k, b.Ops[k].Kind, mode, got, want)
			}
			a.Close()
		}
	}
}
