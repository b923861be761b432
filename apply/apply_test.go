package apply

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// TestConfinement: a batch that tries to reach outside the target through
// a symlink planted inside it fails, and nothing outside changes.
func TestConfinement(t *testing.T) {
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	os.Symlink(outside, filepath.Join(target, "escape"))
	os.Symlink(victim, filepath.Join(target, "victimlink"))
	os.Symlink("../../..", filepath.Join(target, "up"))
	a, err := New(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	attempts := []journal.Op{
		{Kind: journal.KindWrite, Path: "escape/victim", Data: []byte("pwned")},
		{Kind: journal.KindWrite, Path: "victimlink", Data: []byte("pwned")},
		{Kind: journal.KindTruncate, Path: "victimlink", Size: 0},
		{Kind: journal.KindTruncate, Path: "escape/victim", Size: 0},
		{Kind: journal.KindCreate, Path: "escape/new", Mode: 0o644},
		{Kind: journal.KindMkdir, Path: "up/tmp/pbfs-escape", Mode: 0o755},
		{Kind: journal.KindChmod, Path: "victimlink", Mode: 0o777},
		{Kind: journal.KindChmod, Path: "escape/victim", Mode: 0o777},
		{Kind: journal.KindChown, Path: "escape/victim", UID: 1, GID: 1},
		{Kind: journal.KindSetxattr, Path: "victimlink", Name: "user.x", Data: []byte("1")},
		{Kind: journal.KindUnlink, Path: "escape/victim"},
		{Kind: journal.KindRename, Path: "escape/victim", Path2: "stolen"},
		{Kind: journal.KindLink, Path: "escape/victim", Path2: "stolen"},
		{Kind: journal.KindSymlink, Path: "escape/s", Target: "x"},
		{Kind: journal.KindUtimens, Path: "escape/victim", Atime: 0, Mtime: 0},
		{Kind: journal.KindWrite, Path: "../victim", Data: []byte("pwned")},
		{Kind: journal.KindWrite, Path: "/etc/passwd", Data: []byte("pwned")},
	}
	for _, op := range attempts {
		err := a.Apply(&journal.Batch{Seq: 1, Ops: []journal.Op{op}})
		if err == nil {
			t.Errorf("%s %q was applied", op.Kind, op.Path)
		}
	}
	data, _ := os.ReadFile(victim)
	fi, _ := os.Stat(victim)
	if string(data) != "untouched" || fi.Mode().Perm() != 0o644 {
		t.Fatalf("outside file changed: %q %v", data, fi.Mode())
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 {
		t.Fatalf("outside dir has %d entries", len(ents))
	}
	if _, err := os.Stat("/tmp/pbfs-escape"); err == nil {
		t.Fatal("escaped through ../../..")
	}
}

// TestStopsAndReportsFailedOp: a failing op stops the batch with an error
// that names it (XDN's applier stopped silently and exited 0).
func TestStopsAndReportsFailedOp(t *testing.T) {
	target, a := newTarget(t)
	b := &journal.Batch{Seq: 9, Ops: []journal.Op{
		{Kind: journal.KindCreate, Path: "one", Mode: 0o644},
		{Kind: journal.KindWrite, Path: "missing", Data: []byte("x")},
		{Kind: journal.KindCreate, Path: "three", Mode: 0o644},
	}}
	err := a.Apply(b)
	var oe *OpError
	if !errors.As(err, &oe) || oe.Index != 1 || oe.Seq != 9 {
		t.Fatalf("Apply: %v, want an OpError for op 1 of batch 9", err)
	}
	if _, err := os.Stat(filepath.Join(target, "three")); err == nil {
		t.Fatal("ops after the failed one were applied")
	}
}

func TestMissingTarget(t *testing.T) {
	if _, err := New(filepath.Join(t.TempDir(), "nope"), nil); err == nil {
		t.Fatal("New on a missing directory succeeded")
	}
}

func TestRedoable(t *testing.T) {
	op := func(k journal.Kind, p, p2 string) journal.Op { return journal.Op{Kind: k, Path: p, Path2: p2} }
	cases := []struct {
		ops  []journal.Op
		want bool
	}{
		{[]journal.Op{op(journal.KindCreate, "a", ""), op(journal.KindMkdir, "d", ""), op(journal.KindWrite, "a", "")}, true},
		{[]journal.Op{op(journal.KindRename, "a", "b"), op(journal.KindCreate, "a", "")}, false},   // name reused
		{[]journal.Op{op(journal.KindCreate, "d/x", ""), op(journal.KindRename, "d", "e")}, false}, // inside a moved dir
		{[]journal.Op{op(journal.KindUnlink, "old", ""), op(journal.KindRename, "t", "f")}, true},
	}
	for i, c := range cases {
		if got := Redoable(&journal.Batch{Ops: c.ops}); got != c.want {
			t.Errorf("case %d: Redoable = %v, want %v", i, got, c.want)
		}
	}
}

// TestReconcileKeepsWhatIsRight: a resync onto a target that already
// matches changes nothing and needs no blocks; one altered block is all
// that differs.
func TestReconcileKeepsWhatIsRight(t *testing.T) {
	target := t.TempDir()
	data := make([]byte, 200000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	os.WriteFile(filepath.Join(target, "f"), data, 0o644)
	os.Mkdir(filepath.Join(target, "d"), 0o755)
	os.Link(filepath.Join(target, "f"), filepath.Join(target, "d", "g"))
	a, _ := New(target, nil)
	defer a.Close()
	var theirs [][]byte
	for off := 0; off < len(data); off += 65536 {
		theirs = append(theirs, BlockSum(data[off:min(off+65536, len(data))]))
	}
	run := func() int {
		rc := a.Reconciler()
		if cmp, err := rc.Ensure(&Spec{Path: "f", Mode: 0o100644, Size: uint64(len(data))}); err != nil || !cmp {
			t.Fatalf("Ensure f: %v %v", cmp, err)
		}
		want, err := rc.Compare("f", 65536, Sums{Blocks: uint64(len(theirs)), Sums: theirs}, false)
		if err != nil {
			t.Fatal(err)
		}
		differ := len(want)
		rc.Ensure(&Spec{Path: "d", Mode: 0o40755})
		rc.Ensure(&Spec{Path: "d/g", Mode: 0o100644, LinkTo: "f"})
		if rc.Changed != 0 {
			t.Fatalf("a matching target: %d paths changed", rc.Changed)
		}
		return differ
	}
	if n := run(); n != 0 {
		t.Fatalf("a matching file: %d blocks differ", n)
	}
	f, _ := os.OpenFile(filepath.Join(target, "f"), os.O_WRONLY, 0)
	f.WriteAt([]byte("altered"), 70000)
	f.Close()
	if n := run(); n != 1 {
		t.Fatalf("one altered block: %d blocks differ", n)
	}
}

// TestReconcileKeepsHoles: a block the primary has as a hole is never
// asked for; where the backup has data there it gets a hole, and a file
// the resync creates stays sparse. Both forms of sums: one per block (a
// primary from before sparse sums), and data blocks only.
func TestReconcileKeepsHoles(t *testing.T) {
	const block = 65536
	// The primary: data in blocks 0 and 5, holes elsewhere.
	dense := make([][]byte, 8)
	for i := range dense {
		dense[i] = HoleSum
	}
	dense[0] = BlockSum(bytes.Repeat([]byte("d"), block))
	dense[5] = BlockSum(bytes.Repeat([]byte("x"), block))
	for name, theirs := range map[string]Sums{
		"dense":  {Blocks: 8, Sums: dense},
		"sparse": {Blocks: 8, Sparse: true, Index: []uint64{0, 5}, Sums: [][]byte{dense[0], dense[5]}},
	} {
		t.Run(name, func(t *testing.T) {
			if err := theirs.Check(8*block, block); err != nil {
				t.Fatal(err)
			}
			target := t.TempDir()
			// The backup's copy: data everywhere.
			os.WriteFile(filepath.Join(target, "dense"), bytes.Repeat([]byte("d"), 8*block), 0o644)
			a, _ := New(target, nil)
			defer a.Close()
			rc := a.Reconciler()
			want, err := rc.Compare("dense", block, theirs, false)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(want) != "[5]" {
				t.Fatalf("wanted blocks %v, want [5]", want)
			}
			var st unix.Stat_t
			unix.Stat(filepath.Join(target, "dense"), &st)
			if used := st.Blocks * 512; used > 2*block+8192 {
				t.Fatalf("holes on the primary left %d bytes allocated on the backup, want about %d", used, 2*block)
			}
			if data, _ := os.ReadFile(filepath.Join(target, "dense")); !bytes.Equal(data[block:2*block], make([]byte, block)) {
				t.Fatal("a punched block does not read as zeros")
			}
			// A fresh file: only data blocks are asked for.
			want, err = rc.Compare("new", block, theirs, true)
			if err != nil || fmt.Sprint(want) != "[0 5]" {
				t.Fatalf("fresh file: wanted %v %v, want [0 5]", want, err)
			}
		})
	}
}

// Sums that do not describe the file are refused before anything is
// read or punched: a hostile or broken primary cannot make the backup
// index past its lists.
func TestSumsCheck(t *testing.T) {
	sum := BlockSum([]byte("x"))
	for name, s := range map[string]Sums{
		"dense, too many":     {Blocks: 3, Sums: [][]byte{sum, sum, sum}},
		"dense, count":        {Blocks: 2, Sums: [][]byte{sum}},
		"sparse, count":       {Blocks: 2, Sparse: true, Index: []uint64{0, 1}, Sums: [][]byte{sum}},
		"sparse, blocks":      {Blocks: 3, Sparse: true, Index: []uint64{}, Sums: nil},
		"sparse, past end":    {Blocks: 2, Sparse: true, Index: []uint64{2}, Sums: [][]byte{sum}},
		"sparse, unordered":   {Blocks: 2, Sparse: true, Index: []uint64{1, 0}, Sums: [][]byte{sum, sum}},
		"sparse, repeated":    {Blocks: 2, Sparse: true, Index: []uint64{1, 1}, Sums: [][]byte{sum, sum}},
		"sparse, hole listed": {Blocks: 2, Sparse: true, Index: []uint64{1}, Sums: [][]byte{HoleSum}},
	} {
		if err := s.Check(2*65536, 65536); !errors.Is(err, ErrBadSums) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := (Sums{Blocks: 2, Sparse: true, Index: []uint64{}}).Check(2*65536-1, 65536); err != nil {
		t.Errorf("all holes: %v", err)
	}
}

// TestResyncNeverRemovesWhatIsNotTheVolume: a resync removes what the
// primary lacks, but never a protected directory (a backup's journal)
// nor another file system mounted inside the target.
func TestResyncNeverRemovesWhatIsNotTheVolume(t *testing.T) {
	target := t.TempDir()
	journalDir := filepath.Join(target, "journal")
	os.MkdirAll(journalDir, 0o700)
	os.WriteFile(filepath.Join(journalDir, "000001.vlog"), []byte("precious"), 0o600)
	os.WriteFile(filepath.Join(target, "extra"), []byte("the primary lacks this"), 0o644)
	mnt := filepath.Join(target, "mnt")
	os.Mkdir(mnt, 0o755)
	mounted := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m") == nil
	if mounted {
		t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
		os.WriteFile(filepath.Join(mnt, "other-fs"), []byte("not ours"), 0o644)
	}
	a, err := New(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Protect(journalDir); err != nil {
		t.Fatal(err)
	}
	rc := a.Reconciler()
	if err := rc.Done(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(target, "extra")); !os.IsNotExist(err) {
		t.Fatalf("an extra file survived the resync: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(journalDir, "000001.vlog")); err != nil || string(data) != "precious" {
		t.Fatalf("the resync removed the protected journal: %v", err)
	}
	if mounted {
		if _, err := os.Stat(filepath.Join(mnt, "other-fs")); err != nil {
			t.Fatalf("the resync removed a file of another file system: %v", err)
		}
		// Nor when a targeted resync's scope reaches into it.
		rc = a.Reconciler()
		if err := rc.Limit([]string{"mnt/other-fs", "journal/000001.vlog"}); err != nil {
			t.Fatal(err)
		}
		if err := rc.Done(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(mnt, "other-fs")); err != nil || rc.Foreign != 2 {
			t.Fatalf("a scoped resync removed a file of another file system: %v", err)
		}
		if data, err := os.ReadFile(filepath.Join(journalDir, "000001.vlog")); err != nil || string(data) != "precious" {
			t.Fatalf("a scoped resync removed a file of the protected journal: %v", err)
		}
	}
	// A primary with a file where the journal is: the resync fails
	// rather than remove it.
	rc = a.Reconciler()
	if _, err := rc.Ensure(&Spec{Path: "journal", Mode: 0o100644}); !errors.Is(err, ErrProtected) {
		t.Fatalf("replacing the protected directory: %v, want ErrProtected", err)
	}
}

// The volume's root takes extended attributes, times and modes like any
// directory: a setxattr on "." stalled every backup with EPERM once (the
// call reached the /proc link, not the directory).
func TestRootAttributes(t *testing.T) {
	target := t.TempDir()
	a, err := New(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ops := []journal.Op{
		{Kind: journal.KindSetxattr, Path: ".", Name: "user.root", Data: []byte("on the root")},
		{Kind: journal.KindSetxattr, Path: ".", Name: "user.gone", Data: []byte("x")},
		{Kind: journal.KindRemovexattr, Path: ".", Name: "user.gone"},
		{Kind: journal.KindChmod, Path: ".", Mode: 0o1750},
		{Kind: journal.KindUtimens, Path: ".", Atime: journal.OmitTime, Mtime: 1e18},
	}
	if err := a.Apply(&journal.Batch{Seq: 1, Ops: ops}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := unix.Getxattr(target, "user.root", buf)
	if err != nil || string(buf[:n]) != "on the root" {
		t.Fatalf("user.root: %q %v", buf[:max(n, 0)], err)
	}
	if _, err := unix.Getxattr(target, "user.gone", buf); !errors.Is(err, unix.ENODATA) {
		t.Fatalf("user.gone after removexattr: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(target, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o1750 || st.Mtim.Nano() != 1e18 {
		t.Fatalf("root mode %#o mtime %d", st.Mode&0o7777, st.Mtim.Nano())
	}
}

// A write strips a file capability on the target as it did on the
// primary, before the primary's recorded removexattr comes: the removal
// of what is gone already is done, not a stall.
func TestCapabilityRemovedByTheWrite(t *testing.T) {
	target := t.TempDir()
	p := filepath.Join(target, "prog")
	if err := os.WriteFile(p, []byte("elf"), 0o755); err != nil {
		t.Fatal(err)
	}
	// VFS_CAP_REVISION_2, CAP_NET_BIND_SERVICE permitted.
	caps := []byte{0, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if err := unix.Setxattr(p, "security.capability", caps, 0); err != nil {
		t.Skipf("cannot set a file capability here: %v", err)
	}
	a, err := New(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ops := []journal.Op{
		{Kind: journal.KindWrite, Path: "prog", Data: []byte("ELF")},
		{Kind: journal.KindRemovexattr, Path: "prog", Name: "security.capability"},
	}
	if err := a.Apply(&journal.Batch{Seq: 1, Ops: ops}); err != nil {
		t.Fatalf("a write and the capability's removal: %v", err)
	}
	if _, err := unix.Getxattr(p, "security.capability", make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
		t.Fatalf("the capability is still there: %v", err)
	}
	// An inheritable ACL the target's entry never got (the primary says
	// so when the entry's parent lost its default ACL in the batch).
	err = a.Apply(&journal.Batch{Seq: 2, Ops: []journal.Op{{Kind: journal.KindRemovexattr, Path: "prog", Name: "system.posix_acl_access"}}})
	if err != nil {
		t.Fatalf("removing an ACL the target's file never inherited: %v", err)
	}
	// Any other attribute the target lacks is still a divergence.
	err = a.Apply(&journal.Batch{Seq: 3, Ops: []journal.Op{{Kind: journal.KindRemovexattr, Path: "prog", Name: "user.never"}}})
	if !errors.Is(err, unix.ENODATA) {
		t.Fatalf("removing an attribute the target never had: %v", err)
	}
}
