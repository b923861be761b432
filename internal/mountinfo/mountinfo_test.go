package mountinfo

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLookupAndFSPath: the table shows a bind mount, its device and where
// inside the file system it comes from.
func TestLookupAndFSPath(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "with space", "src"), filepath.Join(dir, "dst")
	os.MkdirAll(src, 0o755)
	os.Mkdir(dst, 0o755)
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v (needs root)", err)
	}
	defer unix.Unmount(dst, unix.MNT_DETACH)
	tab, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := tab.At(dst)
	if !ok {
		t.Fatalf("no mount at %s", dst)
	}
	sdev, spath := tab.FSPath(src)
	ddev, dpath := tab.FSPath(filepath.Join(dst, "x"))
	if sdev != m.Dev || ddev != m.Dev || dpath != filepath.Join(spath, "x") {
		t.Fatalf("bind mount of %s (%s %s) at %s: %s %s", src, sdev, spath, dst, ddev, dpath)
	}
	if m.FSType == "" {
		t.Fatal("no file system type")
	}
}
