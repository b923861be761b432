// Package treecmp compares a primary's volume with a backup's, path by
// path: what every benchmark checks before it trusts its numbers. It reads
// both trees with the tests' snapshot (internal/fstest), so a benchmark
// and a test that call two trees equal mean the same thing.
package treecmp

import (
	"fmt"
	"path"
	"path/filepath"

	"github.com/pbfs/pbfs/internal/fstest"
)

// Options narrow a comparison; the zero value compares every attribute a
// backup replicates but modification times (counted, not failed) and
// where files hold space.
type Options struct {
	// Skip lists base-name patterns (path.Match) of files the primary
	// keeps to itself, such as a database's temporary files.
	Skip []string
	// ContentOnly compares regular files only, by size and contents.
	ContentOnly bool
	// Exact compares as the tests do (fstest.Diff): modification times
	// and, where both sides can say, allocation too, and the roots.
	Exact bool
}

// Comparison is the outcome of Compare.
type Comparison struct {
	Paths      int
	Bytes      int64 // content bytes on the primary
	Diffs      []string
	MtimeFiles int // regular files whose mtime differs (reported, not a failure)
	MtimeDirs  int
}

// OK reports whether the trees are equal.
func (c Comparison) OK() bool { return len(c.Diffs) == 0 }

// Compare compares the backup's volume with the primary's, with the zero
// Options.
func Compare(primary, backup string) (Comparison, error) {
	return CompareWith(primary, backup, Options{})
}

// CompareWith compares the backup's volume with the primary's.
func CompareWith(primary, backup string, o Options) (Comparison, error) {
	var c Comparison
	want, err := read(primary, o)
	if err != nil {
		return c, err
	}
	got, err := read(backup, o)
	if err != nil {
		return c, err
	}
	c.Paths = len(want)
	for _, e := range want {
		c.Bytes += e.Size
	}
	if o.Exact {
		c.Diffs = fstest.Diff(want, got, 1<<30)
		return c, nil
	}
	for _, k := range fstest.Names(want, got) {
		w, inW := want[k]
		g, inG := got[k]
		switch {
		case !inG:
			c.Diffs = append(c.Diffs, fmt.Sprintf("%s missing on the backup (primary: %s)", k, show(w)))
		case !inW:
			c.Diffs = append(c.Diffs, fmt.Sprintf("%s only on the backup (%s)", k, show(g)))
		case !sameBut(w, g):
			c.Diffs = append(c.Diffs, fmt.Sprintf("%s differs: primary %s; backup %s", k, show(w), show(g)))
		case w.Mtime != g.Mtime && w.Type == "file":
			c.MtimeFiles++
		case w.Mtime != g.Mtime && w.Type == "dir":
			c.MtimeDirs++
		}
	}
	return c, nil
}

// read snapshots dir and keeps what o compares.
func read(dir string, o Options) (fstest.Tree, error) {
	tree, err := fstest.ReadTree(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	for rel, e := range tree {
		switch {
		case skipped(filepath.Base(rel), o.Skip), o.ContentOnly && e.Type != "file":
			delete(tree, rel)
		case o.ContentOnly:
			tree[rel] = fstest.Entry{Type: e.Type, Size: e.Size, Hash: e.Hash}
		case rel == "." && !o.Exact:
			e.Mode, e.UID, e.GID, e.Mtime = 0, 0, 0, 0 // the roots are different directories
			tree[rel] = e
		}
	}
	return tree, nil
}

func skipped(name string, patterns []string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// sameBut reports whether two entries agree in everything but their
// modification time and allocation.
func sameBut(w, g fstest.Entry) bool {
	w.Mtime, g.Mtime, w.Alloc, g.Alloc = 0, 0, "", ""
	return w == g
}

func show(e fstest.Entry) string {
	return fmt.Sprintf("%s perm=%o uid=%d gid=%d size=%d hash=%s target=%q xattrs=%q links=%q",
		e.Type, e.Mode, e.UID, e.GID, e.Size, e.Hash, e.Target, e.Xattrs, e.Links)
}
