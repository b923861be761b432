package mount_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// A stop forced after the mount's FUSE connection ended aborts nothing:
// the kernel gives the connection's id (a minor device number) to the
// next FUSE mount, and an abort through that id ended a stranger's mount
// (another volume's, on a machine running several).
func TestAbortAfterTheConnectionEndedLeavesOtherMountsAlone(t *testing.T) {
	fstest.RequireFUSE(t)
	dir := t.TempDir()
	start := func(name string) (*mount.Mount, string) {
		vol := filepath.Join(dir, name)
		if err := os.Mkdir(vol, 0o755); err != nil {
			t.Fatal(err)
		}
		m, err := mount.Start(mount.Config{Mountpoint: vol, Journal: filepath.Join(dir, name+".j")})
		if err != nil {
			t.Fatal(err)
		}
		return m, vol
	}
	gone, _ := start("gone")
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ { // one of them likely takes the freed id
		m, vol := start("live" + strconv.Itoa(i))
		t.Cleanup(func() { m.Close() })
		gone.Abort()
		if err := fstest.WriteOwn(t, filepath.Join(vol, "f"), []byte("still served")); err != nil {
			t.Fatalf("mount %d, after an abort of a mount that had ended: %v", i, err)
		}
	}
}
