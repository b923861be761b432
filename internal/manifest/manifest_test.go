package manifest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A manifest never leaves its root: ".." and symlinks out are refused,
// not followed; FIFOs are listed without being opened.
func TestWalkConfined(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	os.MkdirAll(filepath.Join(root, "d"), 0o755)
	os.WriteFile(filepath.Join(dir, "secret"), []byte("outside"), 0o600)
	os.WriteFile(filepath.Join(root, "d", "f"), []byte("inside"), 0o644)
	os.Symlink(dir, filepath.Join(root, "out"))
	syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644)
	var got []string
	if err := Walk(t.Context(), root, nil, nil, func(e Entry) error { got = append(got, e.Path); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 { // ., d, d/f, fifo, out (not below it)
		t.Fatalf("walk: %v", got)
	}
	for _, p := range []string{"../secret", "out/secret", "/etc/passwd"} {
		err := Walk(t.Context(), root, []string{p}, nil, func(e Entry) error {
			if !e.Missing {
				t.Errorf("%s listed: %+v", p, e)
			}
			return nil
		})
		if err == nil {
			t.Logf("%s: listed as missing", p)
		}
	}
}

// A directory the live service removes between its listing and the walk
// into it is gone, not an error (pbfs verify's first round lists a
// backup while it applies; CI once failed on "readdirent ...: no such
// file or directory"). The root itself must exist.
func TestWalkDirectoryRemovedMidWalk(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "d", "e"), 0o755)
	os.WriteFile(filepath.Join(root, "d", "e", "f"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(root, "z"), []byte("after"), 0o644)
	var got []string
	err := Walk(t.Context(), root, nil, nil, func(e Entry) error {
		got = append(got, e.Path)
		if e.Path == "d" {
			// Listed and stat'ed as a directory; removed before the walk
			// opens it.
			if err := os.RemoveAll(filepath.Join(root, "d")); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk with a directory removed under it: %v", err)
	}
	if len(got) != 3 || got[0] != "." || got[1] != "d" || got[2] != "z" {
		t.Fatalf("walked %v, want [. d z]: the walk goes on past the removed directory", got)
	}
	if err := Walk(t.Context(), filepath.Join(root, "nope"), nil, nil, func(Entry) error { return nil }); err == nil {
		t.Fatal("a missing root walked without an error")
	}
}

// The root comes first, and every entry's extended attributes (ACLs too,
// on every type) are in its digest: two trees that differ only there
// differ.
func TestXattrsCompared(t *testing.T) {
	walk := func(root string) map[string]Entry {
		out := map[string]Entry{}
		if err := Walk(t.Context(), root, nil, nil, func(e Entry) error { out[e.Path] = e; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	mk := func() string {
		root := t.TempDir()
		os.WriteFile(filepath.Join(root, "f"), []byte("x"), 0o644)
		os.Symlink("f", filepath.Join(root, "s"))
		syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644)
		return root
	}
	a, b := mk(), mk()
	for _, p := range []string{".", "f", "fifo"} {
		for _, root := range []string{a, b} {
			if err := unix.Lsetxattr(filepath.Join(root, p), "user.same", []byte("v"), 0); err != nil {
				t.Skipf("no user xattrs here: %v", err)
			}
		}
	}
	ma, mb := walk(a), walk(b)
	for _, p := range []string{".", "f", "s", "fifo"} {
		if d := Diff(ma[p], mb[p]); d != "" || len(ma[p].Xattrs) == 0 {
			t.Fatalf("%s: equal trees differ: %q (digest %x)", p, d, ma[p].Xattrs)
		}
	}
	for _, p := range []string{".", "f", "fifo"} {
		must(t, unix.Lsetxattr(filepath.Join(b, p), "user.same", []byte("w"), 0))
		if d := Diff(walk(a)[p], walk(b)[p]); d == "" {
			t.Errorf("%s: a changed xattr value compares equal", p)
		}
		must(t, unix.Lsetxattr(filepath.Join(b, p), "user.same", []byte("v"), 0))
	}
	must(t, unix.Lsetxattr(filepath.Join(b, "."), "user.extra", nil, 0))
	if d := Diff(walk(a)["."], walk(b)["."]); d == "" {
		t.Error("an extra xattr on the root compares equal")
	}
	old := walk(a)["."]
	old.Xattrs = nil // a backup from before xattr digests
	if d := Diff(old, walk(b)["."]); d != "" {
		t.Errorf("an entry without a digest compared: %q", d)
	}
}
