package fs_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// TestEveryRequestAndFlagReplays drives every FUSE request the kernel
// sends for a mutation, with every flag bit the syscalls behind it take
// (rename flags, fallocate modes, open flags, setattr's valid bits, xattr
// flags and namespaces, mknod types), on every file type, through a real
// mount. Whatever the mount applied it must have journaled, in a form a
// backup applies: afterwards barriers still succeed (no batch wedges the
// journal) and replaying the journal onto the starting state gives the
// mounted tree, byte for byte.
func TestEveryRequestAndFlagReplays(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e := fstest.Setup(t, cfg, seedBasic)
		v := func(p string) string { return filepath.Join(e.Vol, p) }
		r := &driver{t: t}

		r.renames(v)
		r.fallocates(v)
		r.opens(v)
		r.setattrs(v)
		if !cfg.NoXattrs {
			r.xattrs(v)
		}
		r.mknods(v)
		r.others(v)
		e.Barrier()
		e.CheckReplay()

		// The whiteout a RENAME_WHITEOUT left is a 0:0 character device, on
		// the volume and in the replay alike.
		for _, dir := range []string{e.Vol, e.Start} {
			var st unix.Stat_t
			must(t, unix.Lstat(filepath.Join(dir, "rn/wsrc"), &st))
			if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
				t.Errorf("%s: whiteout is %o rdev %d, want a 0:0 character device", dir, st.Mode, st.Rdev)
			}
		}
	})
}

// driver holds the test's expectations: calls that must succeed, and
// calls that must fail with a given errno before touching anything.
type driver struct{ t *testing.T }

func (r *driver) ok(what string, err error) {
	r.t.Helper()
	if err != nil {
		r.t.Errorf("%s: %v", what, err)
	}
}

func (r *driver) fails(what string, err, want error) {
	r.t.Helper()
	if err != want {
		r.t.Errorf("%s: %v, want %v", what, err, want)
	}
}

func file(t *testing.T, p string, data string) {
	t.Helper()
	must(t, os.WriteFile(p, []byte(data), 0o644))
}

// renames tries every combination of the renameat2 flag bits, onto a
// missing and an existing name.
func (r *driver) renames(v func(string) string) {
	must(r.t, os.Mkdir(v("rn"), 0o755))
	for flags := uint(0); flags < 16; flags++ {
		for _, exists := range []bool{false, true} {
			src, dst := v(fmt.Sprintf("rn/s%d-%v", flags, exists)), v(fmt.Sprintf("rn/d%d-%v", flags, exists))
			file(r.t, src, "source")
			if exists {
				file(r.t, dst, "destination")
			}
			err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, flags)
			what := fmt.Sprintf("renameat2 flags %#x onto an existing name %v", flags, exists)
			switch {
			case flags&^7 != 0, flags&unix.RENAME_EXCHANGE != 0 && flags&(unix.RENAME_NOREPLACE|unix.RENAME_WHITEOUT) != 0:
				r.fails(what, err, unix.EINVAL)
			case flags&unix.RENAME_EXCHANGE != 0 && !exists:
				r.fails(what, err, unix.ENOENT)
			case flags&unix.RENAME_NOREPLACE != 0 && exists:
				r.fails(what, err, unix.EEXIST)
			default:
				r.ok(what, err)
			}
		}
	}
	file(r.t, v("rn/wsrc"), "whited out")
	r.ok("RENAME_WHITEOUT", unix.Renameat2(unix.AT_FDCWD, v("rn/wsrc"), unix.AT_FDCWD, v("rn/wdst"), unix.RENAME_WHITEOUT))
	must(r.t, os.Mkdir(v("rn/dir"), 0o755))
	file(r.t, v("rn/dir/inner"), "inner")
	r.ok("RENAME_WHITEOUT of a directory", unix.Renameat2(unix.AT_FDCWD, v("rn/dir"), unix.AT_FDCWD, v("rn/dir2"), unix.RENAME_WHITEOUT))
	r.fails("unknown rename flag bit 31", unix.Renameat2(unix.AT_FDCWD, v("rn/dir2"), unix.AT_FDCWD, v("rn/dir3"), 1<<31), unix.EINVAL)
}

// fallocates tries every combination of the fallocate mode bits the
// kernel knows (0..0x7f), past and inside the end of file.
func (r *driver) fallocates(v func(string) string) {
	f, err := os.OpenFile(v("falloc-all"), os.O_CREATE|os.O_RDWR, 0o644)
	must(r.t, err)
	defer f.Close()
	_, err = f.Write(bytes.Repeat([]byte{0x5A}, 256<<10))
	must(r.t, err)
	for mode := uint32(0); mode < 0x80; mode++ {
		off := int64(mode) * 4096
		err := unix.Fallocate(int(f.Fd()), mode, off, 8192)
		if mode&^(unix.FALLOC_FL_KEEP_SIZE|unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0 {
			if err == nil {
				r.t.Errorf("fallocate mode %#x: succeeded, want a refusal", mode)
			}
			continue
		}
		if mode&unix.FALLOC_FL_PUNCH_HOLE != 0 && (mode&unix.FALLOC_FL_KEEP_SIZE == 0 || mode&unix.FALLOC_FL_ZERO_RANGE != 0) {
			if err == nil {
				r.t.Errorf("fallocate mode %#x: succeeded, want a refusal", mode)
			}
			continue
		}
		r.ok(fmt.Sprintf("fallocate mode %#x", mode), err)
	}
	r.fails("fallocate of length 0", unix.Fallocate(int(f.Fd()), 0, 0, 0), unix.EINVAL)
}

// opens writes through every open(2) flag, alone.
func (r *driver) opens(v func(string) string) {
	must(r.t, os.Mkdir(v("op"), 0o755))
	flags := map[string]int{"append": unix.O_APPEND, "trunc": unix.O_TRUNC, "direct": unix.O_DIRECT, "sync": unix.O_SYNC,
		"dsync": unix.O_DSYNC, "noatime": unix.O_NOATIME, "nonblock": unix.O_NONBLOCK, "noctty": unix.O_NOCTTY,
		"async": unix.O_ASYNC, "excl": unix.O_EXCL, "largefile": unix.O_LARGEFILE, "nofollow": unix.O_NOFOLLOW, "cloexec": unix.O_CLOEXEC}
	for name, fl := range flags {
		for _, pre := range []bool{false, true} {
			p := v(fmt.Sprintf("op/%s-%v", name, pre))
			if pre {
				file(r.t, p, "pre-existing contents, longer than what follows")
			}
			fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|fl, 0o640)
			if pre && fl == unix.O_EXCL {
				r.fails("O_EXCL on an existing file", err, unix.EEXIST)
				continue
			}
			if err != nil {
				r.t.Errorf("open %s: %v", name, err)
				continue
			}
			buf := bytes.Repeat([]byte(name), 4096/len(name)+1)[:4096] // O_DIRECT wants aligned sizes
			_, err = unix.Pwrite(fd, buf, 4096)
			r.ok("pwrite after open "+name, err)
			unix.Close(fd)
		}
	}
	fd, err := unix.Open(v("op"), unix.O_TMPFILE|unix.O_RDWR, 0o600)
	if err == nil {
		unix.Write(fd, []byte("anonymous"))
		unix.Close(fd) // never linked: no trace on the volume
	}
	fd, err = unix.Open(v("op/trunc-true"), unix.O_PATH, 0)
	r.ok("O_PATH", err)
	unix.Close(fd)
}

// setattrs changes every attribute SETATTR carries, by path and through
// an open file, on files, directories, symlinks and special files.
func (r *driver) setattrs(v func(string) string) {
	must(r.t, os.Mkdir(v("sa"), 0o755))
	file(r.t, v("sa/f"), "0123456789")
	must(r.t, unix.Mkfifo(v("sa/fifo"), 0o644))
	must(r.t, os.Symlink("f", v("sa/link")))
	for _, mode := range []uint32{0o7777, 0o4755, 0o2750, 0o1777, 0o000, 0o644} {
		r.ok(fmt.Sprintf("chmod %o", mode), unix.Chmod(v("sa/f"), mode))
		r.ok(fmt.Sprintf("chmod dir %o", mode), unix.Chmod(v("sa"), mode|0o700))
	}
	r.ok("chmod fifo", unix.Chmod(v("sa/fifo"), 0o4600))
	r.ok("chown", unix.Chown(v("sa/f"), 1001, 1002))
	r.ok("chown uid only", unix.Chown(v("sa/f"), 1003, -1))
	r.ok("chown gid only", unix.Chown(v("sa/f"), -1, 1004))
	r.ok("lchown symlink", unix.Lchown(v("sa/link"), 1005, 1006))
	r.ok("chown fifo", unix.Chown(v("sa/fifo"), 1007, 1008))
	r.ok("truncate up", unix.Truncate(v("sa/f"), 1<<20))
	r.ok("truncate down", unix.Truncate(v("sa/f"), 3))
	r.fails("truncate a fifo", unix.Truncate(v("sa/fifo"), 0), unix.EINVAL)
	r.fails("truncate a directory", unix.Truncate(v("sa"), 0), unix.EISDIR)
	r.fails("truncate past the largest file", unix.Truncate(v("sa/f"), 1<<62+1), unix.EFBIG)
	ts := func(sec int64) unix.Timespec { return unix.Timespec{Sec: sec, Nsec: 123} }
	for _, times := range [][2]unix.Timespec{
		{ts(1e9), ts(2e9)},
		{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}},
		{{Nsec: unix.UTIME_OMIT}, ts(3e9)},
		{ts(4e9), {Nsec: unix.UTIME_OMIT}},
		{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_OMIT}},
	} {
		tt := times[:]
		r.ok("utimensat", unix.UtimesNanoAt(unix.AT_FDCWD, v("sa/f"), tt, 0))
		r.ok("utimensat symlink", unix.UtimesNanoAt(unix.AT_FDCWD, v("sa/link"), tt, unix.AT_SYMLINK_NOFOLLOW))
		r.ok("utimensat dir", unix.UtimesNanoAt(unix.AT_FDCWD, v("sa"), tt, 0))
		r.ok("utimensat fifo", unix.UtimesNanoAt(unix.AT_FDCWD, v("sa/fifo"), tt, 0))
	}
	f, err := os.OpenFile(v("sa/f"), os.O_RDWR, 0)
	must(r.t, err)
	defer f.Close()
	r.ok("ftruncate", f.Truncate(77777))
	r.ok("fchmod", f.Chmod(0o6711))
	r.ok("fchown", f.Chown(2001, 2002))
	r.ok("futimens", unix.UtimesNanoAt(int(f.Fd()), "", []unix.Timespec{ts(5e9), ts(6e9)}, unix.AT_EMPTY_PATH))
	_, err = f.WriteAt([]byte("after the setattrs"), 100)
	r.ok("write after fchmod", err)
}

// xattrs sets and removes attributes in every namespace pbfs can reach,
// with every flag, on every file type.
func (r *driver) xattrs(v func(string) string) {
	must(r.t, os.Mkdir(v("xa"), 0o755))
	file(r.t, v("xa/f"), "x")
	must(r.t, os.Symlink("f", v("xa/link")))
	must(r.t, unix.Mkfifo(v("xa/fifo"), 0o600))
	must(r.t, unix.Mknod(v("xa/chr"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))))
	set := func(p, name, val string, flags int) error { return unix.Lsetxattr(v(p), name, []byte(val), flags) }
	r.ok("set", set("xa/f", "user.a", "1", 0))
	r.fails("XATTR_CREATE on an existing attribute", set("xa/f", "user.a", "2", unix.XATTR_CREATE), unix.EEXIST)
	r.ok("XATTR_REPLACE", set("xa/f", "user.a", "3", unix.XATTR_REPLACE))
	r.fails("XATTR_REPLACE of a missing attribute", set("xa/f", "user.b", "4", unix.XATTR_REPLACE), unix.ENODATA)
	r.ok("XATTR_CREATE", set("xa/f", "user.b", "5", unix.XATTR_CREATE))
	r.fails("unknown xattr flag", set("xa/f", "user.c", "6", 4), unix.EINVAL)
	r.ok("empty value", set("xa/f", "user.empty", "", 0))
	r.ok("largest value", set("xa/f", "user.big", string(bytes.Repeat([]byte("v"), 3000)), 0))
	r.ok("trusted", set("xa/f", "trusted.t", "7", 0))
	r.ok("security", set("xa/f", "security.s", "8", 0))
	r.ok("on a directory", set("xa", "user.d", "9", 0))
	r.ok("trusted on a symlink", set("xa/link", "trusted.onlink", "10", unix.XATTR_CREATE))
	r.ok("trusted on a fifo", set("xa/fifo", "trusted.onfifo", "11", 0))
	r.ok("trusted on a device", set("xa/chr", "trusted.ondev", "12", 0))
	caps := binary.LittleEndian.AppendUint32(nil, 0x02000001) // VFS_CAP_REVISION_2, effective
	caps = binary.LittleEndian.AppendUint32(caps, 1<<10)      // CAP_NET_BIND_SERVICE
	caps = append(caps, make([]byte, 12)...)
	r.ok("security.capability", unix.Lsetxattr(v("xa/f"), "security.capability", caps, 0))
	r.ok("remove", unix.Lremovexattr(v("xa/f"), "user.b"))
	r.fails("remove a missing attribute", unix.Lremovexattr(v("xa/f"), "user.b"), unix.ENODATA)
	r.ok("remove on a symlink", unix.Lremovexattr(v("xa/link"), "trusted.onlink"))
	r.ok("trusted on a symlink, again", set("xa/link", "trusted.kept", "13", 0))
}

// mknods makes every node type mknod(2) makes.
func (r *driver) mknods(v func(string) string) {
	must(r.t, os.Mkdir(v("mk"), 0o755))
	for name, mode := range map[string]uint32{"reg": unix.S_IFREG | 0o640, "untyped": 0o600, "fifo": unix.S_IFIFO | 0o666,
		"sock": unix.S_IFSOCK | 0o755, "chr": unix.S_IFCHR | 0o620, "blk": unix.S_IFBLK | 0o660, "whiteout": unix.S_IFCHR} {
		dev := unix.Mkdev(7, 3)
		if name == "whiteout" {
			dev = 0
		}
		r.ok("mknod "+name, unix.Mknod(v("mk/"+name), mode, int(dev)))
	}
	r.fails("mknod of a directory", unix.Mknod(v("mk/dir"), unix.S_IFDIR|0o755, 0), unix.EPERM)
}

// others: the remaining requests that change or sync the tree, and the
// read-only ones around them.
func (r *driver) others(v func(string) string) {
	must(r.t, os.Mkdir(v("ot"), 0o755))
	file(r.t, v("ot/src"), string(bytes.Repeat([]byte("copy me "), 10000)))
	in, err := os.Open(v("ot/src"))
	must(r.t, err)
	defer in.Close()
	out, err := os.OpenFile(v("ot/dst"), os.O_CREATE|os.O_RDWR, 0o644)
	must(r.t, err)
	defer out.Close()
	off := int64(0)
	_, err = unix.CopyFileRange(int(in.Fd()), &off, int(out.Fd()), nil, 30000, 0)
	r.ok("copy_file_range", err)
	_, err = unix.Sendfile(int(out.Fd()), int(in.Fd()), nil, 5000)
	r.ok("sendfile", err)
	r.ok("fsync", out.Sync())
	r.ok("fdatasync", unix.Fdatasync(int(out.Fd())))
	d, err := os.Open(v("ot"))
	must(r.t, err)
	r.ok("fsync of a directory", d.Sync())
	d.Close()
	r.ok("flock", unix.Flock(int(out.Fd()), unix.LOCK_EX))
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 100}
	r.ok("fcntl lock", unix.FcntlFlock(out.Fd(), unix.F_SETLK, &lk))
	if _, err := unix.IoctlGetUint32(int(out.Fd()), unix.FS_IOC_GETFLAGS); err == nil {
		// A file system that answers ioctls would need them replicated.
		r.t.Errorf("FS_IOC_GETFLAGS answered")
	}
	r.ok("setflags refused", nil)
	if err := unix.IoctlSetPointerInt(int(out.Fd()), unix.FS_IOC_SETFLAGS, 0x10); err == nil {
		r.t.Errorf("FS_IOC_SETFLAGS (chattr +i) succeeded; it is not replicated")
	}
	_, err = unix.Seek(int(out.Fd()), 0, unix.SEEK_DATA)
	r.ok("SEEK_DATA", err)
	data, err := unix.Mmap(int(out.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	must(r.t, err)
	copy(data[100:], "stored through a shared mapping")
	r.ok("msync", unix.Msync(data, unix.MS_SYNC))
	copy(data[200:], "stored, not synced: written back at close")
	r.ok("munmap", unix.Munmap(data))
	r.ok("link", os.Link(v("ot/dst"), v("ot/dst-link")))
	r.ok("symlink", os.Symlink("dst-link", v("ot/sym")))
	r.ok("unlink", os.Remove(v("ot/dst-link")))
	r.ok("mkdir", os.Mkdir(v("ot/sub"), 0o700))
	r.ok("rmdir", os.Remove(v("ot/sub")))
	long := bytes.Repeat([]byte("n"), 255)
	r.ok("255-byte name", os.WriteFile(v("ot/"+string(long)), []byte("long"), 0o600))
	r.fails("256-byte name", os.WriteFile(v("ot/"+string(long)+"n"), nil, 0o600).(*os.PathError).Err, unix.ENAMETOOLONG)
}
