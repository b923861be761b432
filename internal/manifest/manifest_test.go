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
	if err := Walk(root, nil, nil, func(e Entry) error { got = append(got, e.Path); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 { // d, d/f, fifo, out (not below it)
		t.Fatalf("walk: %v", got)
	}
	for _, p := range []string{"../secret", "out/secret", "/etc/passwd"} {
		err := Walk(root, []string{p}, nil, func(e Entry) error {
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
