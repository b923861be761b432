package apply

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

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
		// Every data and metadata kind, with the flags that make a
		// second run differ from the first.
		{Kind: journal.KindSetxattr, Path: "b", Name: "user.c", Data: []byte("created"), Flags: journal.XattrCreate},
		{Kind: journal.KindSetxattr, Path: "b", Name: "user.c", Data: []byte("replaced"), Flags: journal.XattrReplace},
		{Kind: journal.KindSetxattr, Path: "b", Name: "user.gone", Data: []byte("x")},
		{Kind: journal.KindRemovexattr, Path: "b", Name: "user.gone"},
		{Kind: journal.KindSetxattr, Path: "e/s", Name: "trusted.onlink", Data: []byte("on a symlink"), Flags: journal.XattrCreate},
		{Kind: journal.KindSetxattr, Path: "fifo", Name: "trusted.onfifo", Data: []byte("on a fifo")},
		{Kind: journal.KindMknod, Path: "whiteout", Mode: syscall.S_IFCHR},
		{Kind: journal.KindSetxattr, Path: "whiteout", Name: "trusted.w", Data: []byte("y"), Flags: journal.XattrCreate},
		{Kind: journal.KindRemovexattr, Path: "whiteout", Name: "trusted.w"},
		{Kind: journal.KindWrite, Path: "pre", Offset: 10, Data: []byte("tail")},
		{Kind: journal.KindFallocate, Path: "pre", Offset: 0, Size: 8192},
		{Kind: journal.KindFallocate, Path: "pre", Flags: journal.FallocPunchHole | journal.FallocKeepSize, Offset: 0, Size: 4096},
		{Kind: journal.KindFallocate, Path: "pre", Flags: journal.FallocZeroRange, Offset: 4096, Size: 16384},
		{Kind: journal.KindChown, Path: "pre", UID: 77, GID: 78},
		{Kind: journal.KindChown, Path: "e/s", UID: 79, GID: journal.NoID},
		{Kind: journal.KindUtimens, Path: "pre", Atime: journal.OmitTime, Mtime: 1234567890123456789},
		{Kind: journal.KindRename, Path: "pre", Path2: "e/pre", Flags: journal.RenameNoReplace},
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
		desc := fmt.Sprintf("%v uid=%d gid=%d rdev=%d xattrs=%q", fi.Mode(), st.Uid, st.Gid, st.Rdev, xattrs(p))
		if rel == "e/pre" {
			desc += fmt.Sprintf(" size=%d mtime=%d blocks=%d", st.Size, st.Mtim.Nano(), st.Blocks)
		}
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

// xattrs lists every extended attribute of p, not following symlinks.
func xattrs(p string) []string {
	buf := make([]byte, 64<<10)
	n, _ := unix.Llistxattr(p, buf)
	var out []string
	for _, name := range strings.Split(strings.TrimRight(string(buf[:max(n, 0)]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		v := make([]byte, 64<<10)
		k, _ := unix.Lgetxattr(p, name, v)
		out = append(out, name+"="+string(v[:max(k, 0)]))
	}
	sort.Strings(out)
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
