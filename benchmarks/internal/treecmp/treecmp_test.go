package treecmp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCompare: equal trees compare equal whatever the roots' and files'
// mtimes (counted); a changed mode, content or a missing file is a
// difference; skipped names and, with ContentOnly, directories are not
// compared; Exact fails on the mtime.
func TestCompare(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, root := range []string{a, b} {
		os.MkdirAll(filepath.Join(root, "d"), 0o755)
		os.WriteFile(filepath.Join(root, "d", "f"), []byte("data"), 0o644)
	}
	os.WriteFile(filepath.Join(a, "tmp.pid"), []byte("1"), 0o644)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(b, "d", "f"), old, old)
	os.Chmod(b, 0o700)
	c, err := CompareWith(a, b, Options{Skip: []string{"*.pid"}})
	if err != nil || !c.OK() || c.MtimeFiles != 1 || c.Paths != 3 || c.Bytes != 4 {
		t.Fatalf("equal trees: %+v %v", c, err)
	}
	if c, _ := CompareWith(a, b, Options{Skip: []string{"*.pid"}, Exact: true}); c.OK() {
		t.Fatal("Exact ignored an mtime")
	}
	if c, _ := Compare(a, b); c.OK() || !strings.Contains(c.Diffs[0], "tmp.pid missing on the backup") {
		t.Fatalf("a file missing on the backup: %v", c.Diffs)
	}
	os.Chmod(filepath.Join(b, "d"), 0o700)
	os.WriteFile(filepath.Join(b, "d", "f"), []byte("dat!"), 0o644)
	c, _ = CompareWith(a, b, Options{Skip: []string{"*.pid"}})
	if len(c.Diffs) != 2 || !strings.Contains(c.Diffs[0], "d differs") || !strings.Contains(c.Diffs[1], "d/f differs") {
		t.Fatalf("a changed mode and content: %v", c.Diffs)
	}
	c, _ = CompareWith(a, b, Options{Skip: []string{"*.pid"}, ContentOnly: true})
	if len(c.Diffs) != 1 || c.Paths != 1 {
		t.Fatalf("ContentOnly: %+v", c)
	}
}
