package manifest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
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
	if len(got) != 4 { // d, d/f, fifo, out (not below it)
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
	if len(got) != 2 || got[0] != "d" || got[1] != "z" {
		t.Fatalf("walked %v, want [d z]: the walk goes on past the removed directory", got)
	}
	if err := Walk(t.Context(), filepath.Join(root, "nope"), nil, nil, func(Entry) error { return nil }); err == nil {
		t.Fatal("a missing root walked without an error")
	}
}
