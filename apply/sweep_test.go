package apply

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
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

// TestResyncMakesRoomOnAFullVolume: a backup whose volume ran out of
// inodes, holding files the primary no longer has in the very directory
// the primary's files go to, still completes a resync of a tree that fits.
func TestResyncMakesRoomOnAFullVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	target := t.TempDir()
	if err := unix.Mount("tmpfs", target, "tmpfs", 0, "size=4m,nr_inodes=40"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(target, unix.MNT_DETACH) })
	n := 0
	for ; ; n++ {
		if err := os.WriteFile(filepath.Join(target, fmt.Sprintf("old%02d", n)), []byte("old"), 0o644); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	if n < 20 {
		t.Fatalf("the volume filled after %d files", n)
	}
	a, err := New(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rc := a.Reconciler()
	for i := 0; i < n-5; i++ {
		s := &Spec{Path: fmt.Sprintf("new%02d", i), Mode: 0o100644, Size: 3}
		if _, err := rc.Ensure(s); err != nil {
			t.Fatalf("ensure %s on the full volume: %v", s.Path, err)
		}
		if err := rc.WriteBlock(s.Path, 0, []byte("new")); err != nil {
			t.Fatalf("write %s: %v", s.Path, err)
		}
		if err := rc.Finish(s); err != nil {
			t.Fatalf("finish %s: %v", s.Path, err)
		}
	}
	if err := rc.Done(); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(target)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != n-5 {
		t.Fatalf("%d entries after the resync, want %d", len(ents), n-5)
	}
	for _, e := range ents {
		if data, err := os.ReadFile(filepath.Join(target, e.Name())); err != nil || string(data) != "new" || e.Name()[:3] != "new" {
			t.Fatalf("%s: %q, %v", e.Name(), data, err)
		}
	}
}
