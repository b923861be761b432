package fs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// Where a write lands: the open file's append mode as of the write, and
// never an append for the kernel's write-back of mapped pages.

// TestAppendModeFollowsFcntl: O_APPEND set or cleared with fcntl(F_SETFL)
// after the open decides where a write lands, as on a local file system.
// pbfs decided by the flags of the open, so a write after O_APPEND was
// cleared still went to the end of the file.
func TestAppendModeFollowsFcntl(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, nil)
		p := filepath.Join(e.Vol, "a")
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_WRONLY|unix.O_APPEND, 0o644)
		must(t, err)
		defer unix.Close(fd)
		_, err = unix.Write(fd, []byte("hello"))
		must(t, err)
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0) // O_APPEND off
		must(t, err)
		_, err = unix.Seek(fd, 0, 0)
		must(t, err)
		_, err = unix.Write(fd, []byte("J"))
		must(t, err)
		_, err = unix.Pwrite(fd, []byte("P"), 2)
		must(t, err)
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, unix.O_APPEND) // and on again
		must(t, err)
		_, err = unix.Pwrite(fd, []byte("!"), 0)
		must(t, err)
		if got, _ := os.ReadFile(p); string(got) != "JePlo!" {
			t.Fatalf("through pbfs: %q, want %q as on a local file system", got, "JePlo!")
		}
		e.CheckReplay()
	})
}

// TestMappedWritesOfAnAppendFile: pages written through a shared mapping
// of a file opened O_APPEND reach the file at their own offsets when the
// kernel writes them back: write-back is never an append.
func TestMappedWritesOfAnAppendFile(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) {
			os.WriteFile(filepath.Join(vol, "m"), bytes.Repeat([]byte("."), 8192), 0o644)
		})
		p := filepath.Join(e.Vol, "m")
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_APPEND, 0)
		must(t, err)
		defer unix.Close(fd)
		mem, err := unix.Mmap(fd, 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		must(t, err)
		copy(mem[100:], "MAPPED")
		must(t, unix.Msync(mem, unix.MS_SYNC))
		must(t, unix.Munmap(mem))
		got, _ := os.ReadFile(p)
		if len(got) != 8192 || string(got[100:106]) != "MAPPED" {
			t.Fatalf("after a mapped write: %d bytes, %q at 100", len(got), got[100:min(len(got), 106)])
		}
		e.CheckReplay()
	})
}
