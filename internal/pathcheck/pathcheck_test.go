package pathcheck

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// bind bind-mounts src at dst for the test; it skips when this process
// may not mount.
func bind(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v (needs root)", err)
	}
	t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
}

func TestOutside(t *testing.T) {
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	os.MkdirAll(filepath.Join(vol, "sub", "j"), 0o755)
	os.Mkdir(filepath.Join(dir, "elsewhere"), 0o755)
	os.Symlink(filepath.Join(vol, "sub"), filepath.Join(dir, "link"))
	inside := map[string]string{
		"the volume itself":                     vol,
		"a subdirectory":                        filepath.Join(vol, "sub", "j"),
		"a subdirectory not yet made":           filepath.Join(vol, "sub", "new", "j"),
		"through a symlink into the volume":     filepath.Join(dir, "link", "j"),
		"a relative path with ..":               filepath.Join(dir, "elsewhere", "..", "vol", "j"),
		"through a bind mount of the volume":    filepath.Join(dir, "volbind", "j"),
		"a bind mount of a directory inside":    filepath.Join(dir, "jbind"),
		"under a bind mount of a dir inside it": filepath.Join(dir, "jbind", "deeper"),
	}
	bind(t, vol, filepath.Join(dir, "volbind"))
	bind(t, filepath.Join(vol, "sub", "j"), filepath.Join(dir, "jbind"))
	for what, j := range inside {
		if err := Outside(j, vol); !errors.Is(err, ErrInside) {
			t.Errorf("%s (%s): %v, want ErrInside", what, j, err)
		}
	}
	for what, j := range map[string]string{
		"a sibling":               filepath.Join(dir, "elsewhere", "j"),
		"the volume's parent":     dir,
		"a name sharing a prefix": vol + "-journal",
	} {
		if err := Outside(j, vol); err != nil {
			t.Errorf("%s (%s): %v, want nil", what, j, err)
		}
	}
}
