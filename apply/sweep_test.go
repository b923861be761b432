package apply

import (
	"os"
	"path/filepath"
	"testing"
)

// TestResyncSweepsListedDirectories: what a backup holds in a directory the
// primary has finished listing goes before the next entry is made (room on
// a full volume), what it holds elsewhere stays until its directory is
// done, and a directory swept too early (entries out of order) is only
// filled again.
func TestResyncSweepsListedDirectories(t *testing.T) {
	target := t.TempDir()
	for _, d := range []string{"a/deep", "b"} {
		if err := os.MkdirAll(filepath.Join(target, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a/keep", "a/extra", "a/deep/extra", "b/extra", "gone"} {
		if err := os.WriteFile(filepath.Join(target, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, err := New(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rc := a.Reconciler()
	exists := func(p string) bool {
		_, err := os.Lstat(filepath.Join(target, p))
		return err == nil
	}
	ensure := func(p string, mode uint32) {
		t.Helper()
		if _, err := rc.Ensure(&Spec{Path: p, Mode: mode}); err != nil {
			t.Fatalf("ensure %s: %v", p, err)
		}
	}
	ensure("a", 0o40755)
	ensure("a/keep", 0o100644)
	ensure("a/deep", 0o40755)
	if !exists("a/extra") || !exists("a/deep/extra") {
		t.Fatal("swept a directory still being listed")
	}
	ensure("b", 0o40755)
	if exists("a/extra") || exists("a/deep/extra") {
		t.Fatal("a's extras are still there once the resync left a")
	}
	if !exists("a/keep") || !exists("b/extra") || !exists("gone") {
		t.Fatal("removed a listed file, or swept b or the root too early")
	}
	ensure("a/late", 0o100644) // out of order: a was swept already
	if !exists("a/late") || !exists("a/keep") {
		t.Fatal("an entry after its directory was swept is not made, or took a listed file along")
	}
	if err := rc.Done(); err != nil {
		t.Fatal(err)
	}
	if exists("b/extra") || exists("gone") || !exists("a/late") || !exists("b") {
		t.Fatal("Done left an extra or removed a listed path")
	}
}
