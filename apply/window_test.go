package apply

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/pbfs/pbfs/journal"
)

func TestWindowAdmits(t *testing.T) {
	op := func(k journal.Kind, p, p2 string) journal.Op { return journal.Op{Kind: k, Path: p, Path2: p2} }
	write := func(p string) journal.Op { return journal.Op{Kind: journal.KindWrite, Path: p, Data: []byte("x")} }
	cases := []struct {
		name    string
		batches [][]journal.Op
		want    int // batches admitted
	}{
		{"data only", [][]journal.Op{{write("a")}, {write("a"), write("b")}, {write("a")}}, 3},
		{"create then write", [][]journal.Op{{op(journal.KindCreate, "a", "")}, {write("a")}}, 2},
		{"name reused by a later batch", [][]journal.Op{{op(journal.KindCreate, "a", "")}, {op(journal.KindUnlink, "a", "")}}, 1},
		{"written, then replaced", [][]journal.Op{{write("p")}, {op(journal.KindRename, "r", "p")}}, 1},
		{"written, then unlinked", [][]journal.Op{{write("p")}, {op(journal.KindUnlink, "p", "")}}, 1},
		{"written, then its directory moved", [][]journal.Op{{write("d/f")}, {op(journal.KindRename, "d", "e")}}, 1},
		{"moved, then written at the new name", [][]journal.Op{{op(journal.KindRename, "d", "e")}, {write("e/f")}}, 2},
		{"a batch Redo cannot finish", [][]journal.Op{{op(journal.KindRename, "a", "b"), op(journal.KindCreate, "a", "")}}, 0},
	}
	for _, c := range cases {
		var w Window
		n := 0
		for _, ops := range c.batches {
			if !w.Admit(&journal.Batch{Ops: ops}, 10) {
				break
			}
			n++
		}
		if n != c.want || w.Len() != n || w.Bytes() != int64(10*n) {
			t.Errorf("%s: %d batches admitted (window %d, %d bytes), want %d", c.name, n, w.Len(), w.Bytes(), c.want)
		}
	}
}

// TestWindowRedoIsExact: random runs of batches on a small tree are cut
// into windows by Admit. For each window, a power loss is modelled: its
// namespace ops reached the disk up to a random op (a journaling file
// system commits them in order) and each data or metadata op before that
// point did or did not. A Redo of every batch of the window, in order,
// must then give the tree a clean apply of the window gives.
func TestWindowRedoIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ref := t.TempDir()
	a, err := New(ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	g := &opGen{rng: rng, exists: map[string]bool{}, dirs: map[string]bool{".": true}}
	windows, losses := 0, 0
	for windows < 40 {
		before := copyTree(t, ref)
		var w Window
		var run []*journal.Batch
		for {
			b := g.batch(t, a)
			if !w.Admit(b, 1) {
				break
			}
			run = append(run, b)
		}
		// The refused batch was applied to ref by g; leave it out of this
		// window's expected tree by replaying the window on a copy.
		if len(run) < 2 {
			continue
		}
		windows++
		want := tree(t, applyRun(t, before, run, -1, nil))
		var all []journal.Op
		for _, b := range run {
			all = append(all, b.Ops...)
		}
		for trial := 0; trial < 4; trial++ {
			cut := rng.IntN(len(all) + 1)
			disk := applyRun(t, before, run, cut, rng)
			b, err := New(disk, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, batch := range run {
				if err := b.RedoUnsynced(batch); err != nil {
					t.Fatalf("window %d, power loss at op %d of %d: redo of batch %d: %v\nops: %v", windows, cut, len(all), batch.Seq, err, opStrings(all))
				}
			}
			b.Close()
			if got := tree(t, disk); !reflect.DeepEqual(got, want) {
				t.Fatalf("window %d, power loss at op %d of %d: redone tree differs\n got %v\nwant %v\nops: %v", windows, cut, len(all), got, want, opStrings(all))
			}
			losses++
		}
	}
	t.Logf("%d windows, %d power losses redone", windows, losses)
}

// TestWindowRuleMatters: a batch that writes a name and a later one that
// renames another file over it are not redoable together, and Redo shows
// why: the write lands on the file the rename brought.
func TestWindowRuleMatters(t *testing.T) {
	before := t.TempDir()
	os.WriteFile(filepath.Join(before, "p"), []byte("old p"), 0o644)
	os.WriteFile(filepath.Join(before, "r"), []byte("the new p"), 0o644)
	run := []*journal.Batch{
		{Seq: 1, Ops: []journal.Op{{Kind: journal.KindWrite, Path: "p", Data: []byte("XX")}}},
		{Seq: 2, Ops: []journal.Op{{Kind: journal.KindRename, Path: "r", Path2: "p"}}},
	}
	var w Window
	if w.Admit(run[0], 1) && w.Admit(run[1], 1) {
		t.Fatal("Window admitted a rename over a name an earlier batch wrote")
	}
	want := tree(t, applyRun(t, before, run, -1, nil))
	disk := applyRun(t, before, run, 2, nil) // all of it reached the disk
	b, _ := New(disk, nil)
	defer b.Close()
	for _, batch := range run {
		b.RedoUnsynced(batch)
	}
	if reflect.DeepEqual(tree(t, disk), want) {
		t.Fatal("the redo came out right; the rule would not be needed")
	}
}

// applyRun copies before and applies run to the copy: all of it (cut < 0),
// or as a power loss leaves it, the namespace ops before op cut and, when
// rng is set, a random half of the data and metadata ops before it.
func applyRun(t *testing.T, before string, run []*journal.Batch, cut int, rng *rand.Rand) string {
	t.Helper()
	dir := copyTree(t, before)
	a, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	i := 0
	for _, b := range run {
		for _, op := range b.Ops {
			if cut >= 0 && i >= cut {
				return dir
			}
			i++
			if cut >= 0 && rng != nil && !op.Kind.IsNamespace() && rng.IntN(2) == 0 {
				continue
			}
			if err := a.ApplyUnsynced(&journal.Batch{Seq: b.Seq, Ops: []journal.Op{op}}); err != nil {
				t.Fatalf("apply %v: %v", op.String(), err)
			}
		}
	}
	return dir
}

func opStrings(ops []journal.Op) []string {
	var out []string
	for i := range ops {
		out = append(out, ops[i].String())
	}
	return out
}

// copyTree copies a tree of directories and regular files.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == src {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Mkdir(filepath.Join(dst, rel), fi.Mode().Perm())
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// opGen makes random batches that apply cleanly to the tree it keeps
// (and applies them there).
type opGen struct {
	rng    *rand.Rand
	exists map[string]bool // regular files
	dirs   map[string]bool
	seq    uint64
}

func (g *opGen) pick(m map[string]bool) (string, bool) {
	var keys []string
	for k := range m {
		if k != "." {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "", false
	}
	// Map order is not rng's: sorted, a run repeats.
	sort.Strings(keys)
	return keys[g.rng.IntN(len(keys))], true
}

func (g *opGen) name() string {
	dirs := []string{"."}
	for d := range g.dirs {
		if d != "." {
			dirs = append(dirs, d)
		}
	}
	sort.Strings(dirs)
	d := dirs[g.rng.IntN(len(dirs))]
	return filepath.Join(d, fmt.Sprintf("%c", 'a'+g.rng.IntN(4)))
}

func (g *opGen) free(p string) bool { return !g.exists[p] && !g.dirs[p] }

// nsOp makes a namespace op, if it can.
func (g *opGen) nsOp() (journal.Op, bool) {
	switch g.rng.IntN(4) {
	case 0:
		if p := g.name(); g.free(p) {
			g.exists[p] = true
			return journal.Op{Kind: journal.KindCreate, Path: p, Mode: 0o644}, true
		}
	case 1:
		if p, ok := g.pick(g.exists); ok {
			delete(g.exists, p)
			return journal.Op{Kind: journal.KindUnlink, Path: p}, true
		}
	case 2:
		if p, ok := g.pick(g.exists); ok {
			if q := g.name(); q != p && !g.dirs[q] {
				delete(g.exists, p)
				g.exists[q] = true
				return journal.Op{Kind: journal.KindRename, Path: p, Path2: q}, true
			}
		}
	case 3:
		if p := g.name(); g.free(p) && filepath.Dir(p) == "." {
			g.dirs[p] = true
			return journal.Op{Kind: journal.KindMkdir, Path: p, Mode: 0o755}, true
		}
	}
	return journal.Op{}, false
}

// dataOp makes a data or metadata op on a file that exists, if one does.
func (g *opGen) dataOp() (journal.Op, bool) {
	p, ok := g.pick(g.exists)
	if !ok {
		return journal.Op{}, false
	}
	switch g.rng.IntN(4) {
	case 0:
		return journal.Op{Kind: journal.KindTruncate, Path: p, Size: uint64(g.rng.IntN(48))}, true
	case 1:
		return journal.Op{Kind: journal.KindChmod, Path: p, Mode: uint32(0o600 + g.rng.IntN(0o100))}, true
	}
	data := make([]byte, 1+g.rng.IntN(64))
	for i := range data {
		data[i] = byte('A' + g.rng.IntN(26))
	}
	return journal.Op{Kind: journal.KindWrite, Path: p, Offset: uint64(g.rng.IntN(32)), Data: data}, true
}

// batch makes the next batch, applies it to the tree behind a, and
// returns it. Like a sealed batch it holds namespace ops first, then data
// and metadata ops on the names files have after them (docs/FORMAT.md §4).
func (g *opGen) batch(t *testing.T, a *Applier) *journal.Batch {
	t.Helper()
	g.seq++
	b := &journal.Batch{Seq: g.seq}
	for try := g.rng.IntN(3); try > 0; try-- {
		if op, ok := g.nsOp(); ok {
			b.Ops = append(b.Ops, op)
		}
	}
	for try := g.rng.IntN(4); try > 0 || len(b.Ops) == 0; try-- {
		if op, ok := g.dataOp(); ok {
			b.Ops = append(b.Ops, op)
		} else if len(b.Ops) == 0 {
			if op, ok := g.nsOp(); ok {
				b.Ops = append(b.Ops, op)
			}
		}
	}
	if err := a.ApplyUnsynced(b); err != nil {
		t.Fatalf("generated batch does not apply: %v (%v)", err, opStrings(b.Ops))
	}
	return b
}
