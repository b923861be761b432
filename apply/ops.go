package apply

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/xattr"
	"github.com/pbfs/pbfs/journal"
)

func (s *session) apply(op *journal.Op) error {
	// Decoders check every op already; a batch built in memory may not
	// have been through one.
	if err := op.Check(); err != nil {
		return err
	}
	s.a.files.changed(op)
	switch op.Kind {
	case journal.KindCreate, journal.KindMknod, journal.KindMkdir, journal.KindSymlink:
		return s.create(op)
	case journal.KindLink:
		return s.a.root.Link(op.Path, op.Path2)
	case journal.KindUnlink, journal.KindRmdir:
		d, base, err := s.dir(op.Path)
		if err != nil {
			return err
		}
		flags := 0
		if op.Kind == journal.KindRmdir {
			flags = unix.AT_REMOVEDIR
		}
		return unix.Unlinkat(fd(d), base, flags)
	case journal.KindRename:
		d1, b1, err := s.dir(op.Path)
		if err != nil {
			return err
		}
		d2, b2, err := s.dir(op.Path2)
		if err != nil {
			return err
		}
		return unix.Renameat2(fd(d1), b1, fd(d2), b2, uint(op.Flags))
	case journal.KindWrite:
		f, err := s.open(op.Path)
		if err != nil {
			return err
		}
		_, err = f.WriteAt(op.Data, int64(op.Offset))
		return err
	case journal.KindTruncate:
		f, err := s.open(op.Path)
		if err != nil {
			return err
		}
		return f.Truncate(int64(op.Size))
	case journal.KindFallocate:
		f, err := s.open(op.Path)
		if err != nil {
			return err
		}
		return unix.Fallocate(fd(f), op.Flags, int64(op.Offset), int64(op.Size))
	case journal.KindChmod:
		// os.Root follows a final symlink only while it stays inside the root.
		return s.a.root.Chmod(op.Path, os.FileMode(op.Mode&0o777)|modeBits(op.Mode))
	case journal.KindChown:
		return s.a.root.Lchown(op.Path, idArg(op.UID), idArg(op.GID))
	case journal.KindUtimens:
		return s.utimens(op)
	case journal.KindSetxattr, journal.KindRemovexattr:
		return s.xattr(op)
	}
	return fmt.Errorf("kind %d: %w", op.Kind, ErrInvalidOp)
}

func (s *session) create(op *journal.Op) error {
	d, base, err := s.dir(op.Path)
	if err != nil {
		return err
	}
	dfd := fd(d)
	perm := op.Mode & 0o7777
	switch op.Kind {
	case journal.KindCreate:
		nfd, err := unix.Openat(dfd, base, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, perm)
		if err != nil {
			return err
		}
		defer unix.Close(nfd)
		if err := unix.Fchown(nfd, int(op.UID), int(op.GID)); err != nil {
			return err
		}
		return unix.Fchmod(nfd, perm)
	case journal.KindMknod:
		typ := op.Mode & unix.S_IFMT
		if typ != unix.S_IFIFO && typ != unix.S_IFCHR && typ != unix.S_IFBLK && typ != unix.S_IFSOCK && typ != unix.S_IFREG {
			return fmt.Errorf("mknod type %#o: %w", typ, ErrInvalidOp)
		}
		if err := unix.Mknodat(dfd, base, op.Mode, int(op.Rdev)); err != nil {
			return err
		}
	case journal.KindMkdir:
		if err := unix.Mkdirat(dfd, base, perm); err != nil {
			return err
		}
	case journal.KindSymlink:
		return lchownAt(dfd, base, op.UID, op.GID, unix.Symlinkat(op.Target, dfd, base))
	}
	if err := lchownAt(dfd, base, op.UID, op.GID, nil); err != nil {
		return err
	}
	// fchmodat follows symlinks, but base was just created as a non-symlink.
	return unix.Fchmodat(dfd, base, perm, 0)
}

func lchownAt(dfd int, base string, uid, gid uint32, prev error) error {
	if prev != nil {
		return prev
	}
	return unix.Fchownat(dfd, base, int(uid), int(gid), unix.AT_SYMLINK_NOFOLLOW)
}

func (s *session) utimens(op *journal.Op) error {
	ts := []unix.Timespec{timespec(op.Atime), timespec(op.Mtime)}
	if op.Path == "." {
		f, err := s.a.root.Open(".")
		if err != nil {
			return err
		}
		defer f.Close()
		return unix.UtimesNanoAt(fd(f), ".", ts, 0)
	}
	d, base, err := s.dir(op.Path)
	if err != nil {
		return err
	}
	return unix.UtimesNanoAt(fd(d), base, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// xattr sets or removes an extended attribute by name (entry), so it
// works on every type, symlinks and special files included, without
// opening the file.
func (s *session) xattr(op *journal.Op) error {
	var name string
	if op.Path == "." {
		n, done, err := xattr.Entry(s.a.root, ".")
		if err != nil {
			return err
		}
		defer done()
		name = n
	} else {
		d, base, err := s.dir(op.Path)
		if err != nil {
			return err
		}
		name = fdPath(fd(d)) + "/" + base
	}
	if op.Kind == journal.KindRemovexattr {
		return unix.Lremovexattr(name, op.Name)
	}
	return unix.Lsetxattr(name, op.Name, op.Data, int(op.Flags))
}

func timespec(ns int64) unix.Timespec {
	if ns == journal.OmitTime {
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	return unix.NsecToTimespec(ns)
}

func idArg(id uint32) int {
	if id == journal.NoID {
		return -1
	}
	return int(id)
}

func modeBits(m uint32) os.FileMode {
	var fm os.FileMode
	if m&unix.S_ISUID != 0 {
		fm |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		fm |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		fm |= os.ModeSticky
	}
	return fm
}
