package fs_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// Privileges a write or chown changes: setuid and setgid bits, capabilities,
// ctime, replicated as the kernel applies them.

// TestSetgidDirectoryGroup: files created in a setgid directory take its
// group, on the primary and the replica alike.
func TestSetgidDirectoryGroup(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) {
			d := filepath.Join(vol, "shared")
			os.Mkdir(d, 0o775)
			os.Chown(d, 0, 4242)
			unix.Chmod(d, 0o2775)
		})
		must(t, os.WriteFile(filepath.Join(e.Vol, "shared", "f"), []byte("x"), 0o644))
		must(t, os.Mkdir(filepath.Join(e.Vol, "shared", "sub"), 0o755))
		var st unix.Stat_t
		must(t, unix.Stat(filepath.Join(e.Vol, "shared", "f"), &st))
		if st.Gid != 4242 {
			t.Fatalf("file in setgid dir has gid %d", st.Gid)
		}
		e.CheckReplay()
	})
}

// TestWriteByOwnerClearsSetuid: an unprivileged write to a setuid file
// clears setuid on the primary (pbfs does it, having told the kernel it
// would) and the chmod reaches the replica.
func TestWriteByOwnerClearsSetuid(t *testing.T) {
	eachMount(t, mount.Config{AllowOther: true}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) {
			os.Chmod(vol, 0o777)
			p := filepath.Join(vol, "prog")
			os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)
			os.Chown(p, 1000, 1000)
			unix.Chmod(p, 0o6755)
		})
		// t.TempDir's directories are 0700; let uid 1000 through.
		openParents(t, e.Dir)
		// The kernel caches the setuid mode first; after the write, a statx
		// that asks for the mode alone must not be answered from that cache.
		var sx unix.Statx_t
		must(t, unix.Statx(unix.AT_FDCWD, filepath.Join(e.Vol, "prog"), 0, unix.STATX_MODE, &sx))
		cmd := exec.Command("/bin/sh", "-c", "printf 'echo hi\\n' >> prog")
		cmd.Dir = e.Vol
		asUser1000(cmd)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("write as uid 1000: %v\n%s", err, out)
		}
		must(t, unix.Statx(unix.AT_FDCWD, filepath.Join(e.Vol, "prog"), 0, unix.STATX_MODE, &sx))
		if sx.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			t.Fatalf("statx(STATX_MODE) right after an unprivileged write: mode %o, setuid/setgid still shown", sx.Mode&0o7777)
		}
		var st unix.Stat_t
		must(t, unix.Stat(filepath.Join(e.Vol, "prog"), &st))
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			t.Fatalf("mode %o after an unprivileged write: setuid/setgid kept", st.Mode&0o7777)
		}
		e.CheckReplay()
	})
}

// TestKillPrivMatchesTheKernel: an unprivileged write, truncate,
// fallocate or O_TRUNC open, or any chown, of a setuid/setgid file clears the bits exactly as the
// kernel does on a local file system, which the test runs the same steps
// on first. A setgid file without group execute loses setgid only when
// the writer or chowner is not in its group and lacks CAP_FSETID
// (setattr_should_drop_sgid); pbfs kept it once, for every writer, and
// cleared it on root's chown of a file of another group (xfstests
// generic/193: -rwSr-Sr-- became -rw-r--r--, not -rw-r-Sr--).
func TestKillPrivMatchesTheKernel(t *testing.T) {
	type step struct {
		name string
		mode uint32
		gid  int
		sh   string // run as uid 1000, gid 1000 (as root if name says root-), in the directory
		uid  int    // the file's owner
	}
	steps := []step{
		{"w-sgid-noexec-othergroup", 0o6767, 0, "echo x >> w-sgid-noexec-othergroup", 0},
		{"w-sgid-noexec-owngroup", 0o2767, 1000, "echo x >> w-sgid-noexec-owngroup", 0},
		{"w-sgid-exec", 0o2777, 0, "echo x >> w-sgid-exec", 0},
		{"t-sgid-noexec-othergroup", 0o6767, 0, "truncate -s 1 t-sgid-noexec-othergroup", 0},
		{"t-sgid-noexec-owngroup", 0o6767, 1000, "truncate -s 1 t-sgid-noexec-owngroup", 0},
		{"o-sgid-noexec-othergroup", 0o2766, 0, ": > o-sgid-noexec-othergroup", 0},
		{"f-suid-sgid-exec", 0o6777, 1000, "fallocate -l 8192 f-suid-sgid-exec", 0},
		{"f-sgid-noexec-othergroup", 0o2766, 0, "fallocate -l 8192 f-sgid-noexec-othergroup", 0},
		{"root-c-suid-sgid-exec", 0o6755, 1000, "chown : root-c-suid-sgid-exec", 0}, // chown(f, -1, -1), as root
		{"root-c-sgid-noexec", 0o2744, 1000, "chown : root-c-sgid-noexec", 0},
		{"root-chown-sgid-noexec", 0o6744, 1000, "chown 1000 root-chown-sgid-noexec", 1000}, // generic/193
		{"root-chown-other-sgid-noexec", 0o6744, 1000, "chown 1000 root-chown-other-sgid-noexec", 0},
		{"root-chgrp-sgid-noexec", 0o6744, 1000, "chgrp 0 root-chgrp-sgid-noexec", 0},
		{"root-chgrp-sgid-exec", 0o6754, 1000, "chgrp 0 root-chgrp-sgid-exec", 0},
		{"chgrp-sgid-noexec-othergroup", 0o2764, 0, "chgrp 1000 chgrp-sgid-noexec-othergroup", 1000},
		{"chgrp-sgid-noexec-owngroup", 0o2764, 1000, "chgrp 1000 chgrp-sgid-noexec-owngroup", 1000},
	}
	run := func(t *testing.T, dir string) map[string]uint32 {
		for _, s := range steps {
			p := filepath.Join(dir, s.name)
			must(t, os.WriteFile(p, []byte("data"), 0o644))
			must(t, os.Chown(p, s.uid, s.gid))
			must(t, unix.Chmod(p, s.mode))
		}
		out := map[string]uint32{}
		for _, s := range steps {
			cmd := exec.Command("/bin/sh", "-c", s.sh)
			cmd.Dir = dir
			if !strings.HasPrefix(s.name, "root-") {
				asUser1000(cmd)
			}
			if o, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s as uid 1000: %v\n%s", s.sh, err, o)
			}
			var st unix.Stat_t
			must(t, unix.Stat(filepath.Join(dir, s.name), &st))
			out[s.name] = st.Mode & 0o7777
		}
		return out
	}
	plain := t.TempDir()
	must(t, os.Chmod(plain, 0o777))
	openParents(t, plain)
	want := run(t, plain)
	eachMount(t, mount.Config{AllowOther: true}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, func(vol string) { os.Chmod(vol, 0o777) })
		openParents(t, e.Dir)
		got := run(t, e.Vol)
		for _, s := range steps {
			if got[s.name] != want[s.name] {
				t.Errorf("%s: mode %o through pbfs, %o on a local file system", s.name, got[s.name], want[s.name])
			}
		}
		e.CheckReplay()
	})
}

// TestChownNoChangeUpdatesCtime: chown(f, -1, -1) changes nothing but
// the ctime, of a file, a directory and a symlink alike, as on ext4
// (pjdfstest chown/00.t); through pbfs the ctime stayed.
func TestChownNoChangeUpdatesCtime(t *testing.T) {
	e := fstest.Setup(t, mount.Config{}, nil)
	must(t, os.WriteFile(filepath.Join(e.Vol, "f"), []byte("x"), 0o644))
	must(t, os.Mkdir(filepath.Join(e.Vol, "d"), 0o755))
	must(t, os.Symlink("f", filepath.Join(e.Vol, "s")))
	for _, name := range []string{"f", "d", "s"} {
		p := filepath.Join(e.Vol, name)
		var before, after unix.Stat_t
		must(t, unix.Lstat(p, &before))
		time.Sleep(20 * time.Millisecond)
		must(t, unix.Fchownat(unix.AT_FDCWD, p, -1, -1, unix.AT_SYMLINK_NOFOLLOW))
		must(t, unix.Lstat(p, &after))
		if after.Ctim.Nano() <= before.Ctim.Nano() {
			t.Errorf("%s: ctime %d after chown(-1, -1), %d before", name, after.Ctim.Nano(), before.Ctim.Nano())
		}
	}
	e.CheckReplay()
}

// TestChownClearsSetidOfSpecialFiles: chown(f, -1, -1) clears setuid, and
// setgid with group execute, of a FIFO, a socket and a device as of a
// regular file, on a plain directory as through pbfs, and the backup
// follows. pbfs's own chown of the backing file, as root, cleared them
// there unrecorded: the backup kept 6755 (pjdfstest chown/00.t).
func TestChownClearsSetidOfSpecialFiles(t *testing.T) {
	plain := t.TempDir()
	e := fstest.Setup(t, mount.Config{}, nil)
	want := map[string]uint32{}
	for _, dir := range []string{plain, e.Vol} {
		must(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
		must(t, unix.Mknod(filepath.Join(dir, "dev"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))))
		must(t, unix.Mknod(filepath.Join(dir, "sock"), unix.S_IFSOCK|0o644, 0))
		must(t, os.WriteFile(filepath.Join(dir, "reg"), nil, 0o644))
		for name, mode := range map[string]uint32{"fifo": 0o6755, "dev": 0o4644, "sock": 0o6710, "reg": 0o6755} {
			p := filepath.Join(dir, name)
			must(t, unix.Chmod(p, mode))
			must(t, unix.Fchownat(unix.AT_FDCWD, p, -1, -1, unix.AT_SYMLINK_NOFOLLOW))
			var st unix.Stat_t
			must(t, unix.Lstat(p, &st))
			if dir == plain {
				want[name] = st.Mode & 0o7777
			} else if got := st.Mode & 0o7777; got != want[name] {
				t.Errorf("%s: mode %o after chown(-1, -1) through pbfs, %o on a plain directory", name, got, want[name])
			}
		}
	}
	if want["fifo"] != 0o755 || want["dev"] != 0o644 {
		t.Fatalf("the kernel left %v", want)
	}
	e.CheckReplay()
}

// TestUnprivilegedWriteDropsCapabilities: a write by a caller without
// CAP_FSETID removes the file's capability, every time one was set again
// through the mount (pbfs remembers a file has none, so that later writes
// skip the removal), and the replica follows.
func TestUnprivilegedWriteDropsCapabilities(t *testing.T) {
	e := fstest.Setup(t, mount.Config{AllowOther: true}, func(vol string) { os.Chmod(vol, 0o777) })
	openParents(t, e.Dir)
	p := filepath.Join(e.Vol, "prog")
	must(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Chown(p, 1000, 1000))
	caps := []byte{1, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	for round := 0; round < 3; round++ {
		must(t, unix.Setxattr(p, "security.capability", caps, 0))
		for i := 0; i < 2; i++ {
			cmd := exec.Command("/bin/sh", "-c", "echo x >> prog")
			cmd.Dir = e.Vol
			asUser1000(cmd)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("write as uid 1000: %v\n%s", err, out)
			}
		}
		if _, err := unix.Lgetxattr(p, "security.capability", make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
			t.Fatalf("round %d: security.capability after an unprivileged write: %v, want ENODATA", round, err)
		}
	}
	e.CheckReplay()
}
