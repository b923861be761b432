package apply

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestScopedResyncLeavesTheRestAlone: a resync limited to subtrees removes
// what the primary did not list inside them (the subtree itself, where the
// primary has none), makes what it listed, sets the attributes of entries
// listed outside them (a parent directory), and leaves everything else,
// listed or not, as it is.
func TestScopedResyncLeavesTheRestAlone(t *testing.T) {
	target := t.TempDir()
	for _, d := range []string{"in/sub", "out", "parent"} {
		if err := os.MkdirAll(filepath.Join(target, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"in/keep", "in/extra", "in/sub/extra", "out/unlisted", "top", "parent/gone"} {
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
	if err := rc.Limit([]string{"in", "parent/gone", "../escape"}); err == nil {
		t.Fatal("a scope path outside the volume was taken")
	}
	if err := rc.Limit([]string{"in", "parent/gone", "new"}); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC).UnixNano()
	for _, s := range []Spec{
		{Path: "in", Mode: 0o40755},
		{Path: "in/keep", Mode: 0o100644},
		{Path: "in/sub", Mode: 0o40755},
		{Path: "new", Mode: 0o40700},
		{Path: "parent", Mode: 0o40750, Mtime: mtime}, // a subtree's parent: its attributes only
	} {
		if _, err := rc.Ensure(&s); err != nil {
			t.Fatalf("ensure %s: %v", s.Path, err)
		}
		if err := rc.Finish(&s); err != nil {
			t.Fatalf("finish %s: %v", s.Path, err)
		}
	}
	if err := rc.Done(); err != nil {
		t.Fatal(err)
	}
	var have []string
	filepath.WalkDir(target, func(p string, _ os.DirEntry, _ error) error {
		rel, _ := filepath.Rel(target, p)
		have = append(have, rel)
		return nil
	})
	want := []string{".", "in", "in/keep", "in/sub", "new", "out", "out/unlisted", "parent", "top"}
	if !slices.Equal(have, want) {
		t.Fatalf("after the scoped resync: %v, want %v", have, want)
	}
	fi, err := os.Stat(filepath.Join(target, "parent"))
	if err != nil || fi.Mode().Perm() != 0o750 || fi.ModTime().UnixNano() != mtime {
		t.Fatalf("the parent's attributes: %v %v", fi, err)
	}
}

// TestSurveyFindsChangesLocalOnlyAndLinks: the walk of a backup's volume
// reports entries changed since a time (directories with their names),
// local-only paths without descending into them, and every name of a file
// with several.
func TestSurveyFindsChangesLocalOnlyAndLinks(t *testing.T) {
	target := t.TempDir()
	for _, d := range []string{"old", "tmp/deep", "fresh"} {
		if err := os.MkdirAll(filepath.Join(target, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"old/a", "old/b", "tmp/deep/x"} {
		if err := os.WriteFile(filepath.Join(target, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(target, "old/a"), filepath.Join(target, "old/a2")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	since := time.Now()
	time.Sleep(50 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(target, "fresh/new"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(target, "old/b"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	sv, err := a.Survey(SurveyOptions{Since: since, Local: func(p string) bool { return p == "tmp" }})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(sv.Changed)
	if !slices.Equal(sv.Changed, []string{"fresh/new", "old/b"}) {
		t.Errorf("changed: %v", sv.Changed)
	}
	if names, ok := sv.ChangedDirs["fresh"]; !ok || !slices.Equal(names, []string{"new"}) || len(sv.ChangedDirs) != 1 {
		t.Errorf("changed directories: %v", sv.ChangedDirs)
	}
	if !slices.Equal(sv.Local, []string{"tmp"}) {
		t.Errorf("local-only: %v", sv.Local)
	}
	var links []string
	for _, names := range sv.Links {
		links = append(links, names...)
	}
	slices.Sort(links)
	if !slices.Equal(links, []string{"old/a", "old/a2"}) {
		t.Errorf("links: %v", links)
	}
	// No time: nothing is reported changed.
	if sv, err := a.Survey(SurveyOptions{}); err != nil || len(sv.Changed) != 0 || len(sv.ChangedDirs) != 0 {
		t.Errorf("a survey without a time: %v %v %v", sv.Changed, sv.ChangedDirs, err)
	}
}
