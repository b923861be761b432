package fs_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// TestOpenByHandle: file handles resolve after the kernel dropped its
// inodes (drop_caches), as xfstests generic/467 checks: of a file, of a
// directory, of a file in a directory both evicted, of a file looked up
// by name again before, of a file renamed or hard-linked and unlinked,
// and of a file unlinked while still open; and a handle of a file deleted
// and closed is stale. The kernel answered ESTALE for every one (pbfs
// did not offer FUSE_EXPORT_SUPPORT), and pbfs could not have found the
// file anyway: it evicts a node the kernel forgets, and an unlinked
// file's open answered ESTALE.
func TestOpenByHandle(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, nil)
		must(t, os.MkdirAll(filepath.Join(e.Vol, "d", "sub"), 0o755))
		names := []string{"d/plain", "d/sub/deep", "d/again", "d/moved", "d/linked", "d/open", "d/deleted"}
		handles := map[string]unix.FileHandle{}
		for _, name := range append(names, "d") {
			p := filepath.Join(e.Vol, name)
			if name != "d" {
				must(t, os.WriteFile(p, []byte("data of "+name), 0o644))
			}
			h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p, 0)
			must(t, err)
			handles[name] = h
		}
		must(t, os.Rename(filepath.Join(e.Vol, "d/moved"), filepath.Join(e.Vol, "d/moved2")))
		must(t, os.Link(filepath.Join(e.Vol, "d/linked"), filepath.Join(e.Vol, "d/linked2")))
		must(t, os.Remove(filepath.Join(e.Vol, "d/linked")))
		open, err := os.Open(filepath.Join(e.Vol, "d/open"))
		must(t, err)
		defer open.Close()
		must(t, os.Remove(filepath.Join(e.Vol, "d/open")))
		must(t, os.Remove(filepath.Join(e.Vol, "d/deleted")))
		must(t, os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0))
		if _, err := os.Stat(filepath.Join(e.Vol, "d/again")); err != nil {
			t.Fatal(err)
		}
		root, err := unix.Open(e.Vol, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		must(t, err)
		defer unix.Close(root)
		for _, name := range names {
			fd, err := unix.OpenByHandleAt(root, handles[name], unix.O_RDONLY)
			if name == "d/deleted" {
				if !errors.Is(err, unix.ESTALE) && !errors.Is(err, unix.ENOENT) {
					t.Errorf("open_by_handle of %s, deleted: %v, want ESTALE", name, err)
				}
				if err == nil {
					unix.Close(fd)
				}
				continue
			}
			if err != nil {
				t.Errorf("open_by_handle of %s: %v", name, err)
				continue
			}
			f := os.NewFile(uintptr(fd), name)
			buf := make([]byte, 64)
			k, _ := f.Read(buf)
			f.Close()
			if got := string(buf[:k]); got != "data of "+name {
				t.Errorf("open_by_handle of %s reads %q", name, got)
			}
		}
		fd, err := unix.OpenByHandleAt(root, handles["d"], unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			t.Errorf("open_by_handle of directory d: %v", err)
		} else {
			dir := os.NewFile(uintptr(fd), "d")
			ents, err := dir.ReadDir(-1)
			dir.Close()
			if err != nil || len(ents) != 5 {
				t.Errorf("directory d opened by handle lists %d entries (%v), want 5", len(ents), err)
			}
		}
		e.CheckReplay()
	})
}
