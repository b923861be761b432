package fs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func seedBasic(vol string) {
	os.WriteFile(filepath.Join(vol, "pre"), bytes.Repeat([]byte("p"), 10000), 0o644)
	os.Mkdir(filepath.Join(vol, "olddir"), 0o755)
	os.WriteFile(filepath.Join(vol, "olddir", "x"), []byte("x"), 0o640)
	os.WriteFile(filepath.Join(vol, "linked"), []byte("shared"), 0o644)
	os.Link(filepath.Join(vol, "linked"), filepath.Join(vol, "olddir", "linked2"))
}

// TestEveryOpKind drives every op kind through the mount, then replays the
// journal onto the starting state and compares the trees byte for byte.
func TestEveryOpKind(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, seedBasic)
		v := func(p string) string { return filepath.Join(e.Vol, p) }

		// create, write, pwrite, truncate, ftruncate
		f, err := os.Create(v("a"))
		must(t, err)
		_, err = f.Write(bytes.Repeat([]byte("abcdefgh"), 5000))
		must(t, err)
		_, err = f.WriteAt([]byte("OVERWRITE"), 100)
		must(t, err)
		must(t, f.Truncate(30000))
		must(t, f.Close())
		must(t, os.Truncate(v("pre"), 777))
		// mknod (fifo), mkdir, symlink, link
		must(t, unix.Mkfifo(v("fifo"), 0o600))
		must(t, os.MkdirAll(v("d1/d2"), 0o750))
		must(t, os.Symlink("../a", v("d1/sl")))
		must(t, os.Link(v("a"), v("d1/a-link")))
		// rename, RENAME_NOREPLACE, RENAME_EXCHANGE, rename over an existing file
		must(t, os.WriteFile(v("b"), []byte("bee"), 0o600))
		must(t, os.Rename(v("b"), v("d1/d2/b")))
		must(t, unix.Renameat2(unix.AT_FDCWD, v("d1/d2/b"), unix.AT_FDCWD, v("b2"), unix.RENAME_NOREPLACE))
		if err := unix.Renameat2(unix.AT_FDCWD, v("b2"), unix.AT_FDCWD, v("a"), unix.RENAME_NOREPLACE); err != unix.EEXIST {
			t.Fatalf("RENAME_NOREPLACE onto an existing name: %v, want EEXIST", err)
		}
		must(t, unix.Renameat2(unix.AT_FDCWD, v("b2"), unix.AT_FDCWD, v("olddir/x"), unix.RENAME_EXCHANGE))
		must(t, os.WriteFile(v("c"), []byte("replacement"), 0o644))
		must(t, os.Rename(v("c"), v("linked")))
		must(t, os.Rename(v("olddir"), v("d1/moved")))
		// unlink, rmdir
		must(t, os.Remove(v("d1/moved/x")))
		must(t, os.Mkdir(v("gone"), 0o700))
		must(t, os.Remove(v("gone")))
		// chmod, chown, utimens (explicit and symlink)
		must(t, unix.Chmod(v("a"), 0o4750))
		must(t, os.Chown(v("a"), 1234, 5678))
		must(t, os.Lchown(v("d1/sl"), 42, 43))
		must(t, os.WriteFile(v("suid"), []byte("#!"), 0o600))
		must(t, os.Chown(v("suid"), 7, 8))
		must(t, unix.Chmod(v("suid"), 0o6755))
		must(t, unix.Chmod(v("d1/d2"), 0o1777))
		when := time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC)
		must(t, os.Chtimes(v("pre"), when, when))
		// setxattr, removexattr
		if cfg.NoXattrs {
			if err := unix.Setxattr(v("a"), "user.one", []byte("1"), 0); err != unix.EOPNOTSUPP {
				t.Fatalf("setxattr with --no-xattrs: %v, want EOPNOTSUPP", err)
			}
		} else {
			must(t, unix.Setxattr(v("a"), "user.one", []byte("1"), 0))
			must(t, unix.Setxattr(v("a"), "user.two", []byte("2"), 0))
			must(t, unix.Removexattr(v("a"), "user.one"))
			must(t, unix.Setxattr(v("d1"), "user.dir", []byte("on a directory"), 0))
		}
		// fallocate: allocate past the end, punch a hole
		g, err := os.OpenFile(v("falloc"), os.O_CREATE|os.O_RDWR, 0o644)
		must(t, err)
		_, err = g.Write(bytes.Repeat([]byte{0xAA}, 64<<10))
		must(t, err)
		must(t, unix.Fallocate(int(g.Fd()), 0, 0, 128<<10))
		must(t, unix.Fallocate(int(g.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 4096, 8192))
		must(t, g.Close())
		// O_TRUNC on open is an op too (XDN did not record it).
		must(t, os.WriteFile(v("pre2"), []byte("long old content"), 0o644))
		e.Barrier()
		must(t, os.WriteFile(v("pre2"), []byte("new"), 0o644))

		e.CheckReplay()

		var st unix.Stat_t
		must(t, unix.Stat(filepath.Join(e.Start, "pre"), &st))
		if got := time.Unix(st.Mtim.Unix()); !got.Equal(when) {
			t.Errorf("replayed mtime of pre = %v, want %v", got, when)
		}
		if got, _ := os.ReadFile(filepath.Join(e.Start, "pre2")); string(got) != "new" {
			t.Errorf("replayed pre2 = %q, want %q (O_TRUNC lost?)", got, "new")
		}
	})
}

// TestJournalRefusedInsideVolume checks the mount refuses a journal
// directory that lives inside the volume.
func TestJournalRefusedInsideVolume(t *testing.T) {
	fstest.RequireFUSE(t)
	vol := t.TempDir()
	_, err := mount.Start(mount.Config{Mountpoint: vol, Journal: filepath.Join(vol, "sub", "journal")})
	if err == nil {
		t.Fatal("mount with the journal inside the volume succeeded")
	}
	if !bytes.Contains([]byte(err.Error()), []byte("inside the volume")) {
		t.Fatalf("unclear error: %v", err)
	}
}
