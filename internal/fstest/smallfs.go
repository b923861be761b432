package fstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// SmallFS mounts a fresh ext4 of size bytes, in an image file on a loop
// device, and returns where; it is unmounted and detached in Cleanup.
// Tests that fill a disk use it. It skips without root or the tools.
func SmallFS(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a loop-device file system needs root")
	}
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "fs")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v\n%s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(dev, mnt, "ext4", 0, ""); err != nil {
		t.Fatalf("mount %s: %v", dev, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, 0); err != nil {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	return mnt
}

// MountTmpfs mounts a tmpfs of size bytes at dir, unmounted in Cleanup.
// Its extended attributes take values of up to 64 KiB, where ext4
// (without ea_inode) refuses one larger than a block.
func MountTmpfs(t testing.TB, dir string, size int64) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=755", size)); err != nil {
		t.Fatalf("mount a tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
}

// FreeSpace returns the bytes free (to anyone but root) on dir's file
// system, and its size.
func FreeSpace(t testing.TB, dir string) (free, size int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize
}

// TakeSpace allocates a ballast file in dir that leaves about leave bytes
// free on its file system, and returns its path; removing the file gives
// the space back.
func TakeSpace(t testing.TB, dir string, leave int64) string {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("ballast-%d", time.Now().UnixNano()))
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if free, _ := FreeSpace(t, dir); free > leave {
		if err := syscall.Fallocate(int(f.Fd()), 0, 0, free-leave); err != nil {
			t.Fatalf("fallocate %d bytes in %s: %v", free-leave, dir, err)
		}
	}
	return p
}

// GiveSpace removes a TakeSpace ballast and syncs its file system: ext4
// counts freed blocks as free only once its journal commits.
func GiveSpace(t testing.TB, ballast string) {
	t.Helper()
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(filepath.Dir(ballast))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		t.Fatal(err)
	}
}
