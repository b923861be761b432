package capture

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// Setattr changes a node's mode, owner, size or times and records each
// change. It returns the attributes after the change.
func (f *FS) Setattr(n *Node, in SetattrIn) (Attr, error) {
	if in.Size != nil {
		// Only a regular file has a size to set; truncate(2) on anything
		// else fails, and opening a FIFO or a device to try would block or
		// reach the device.
		switch {
		case n.typ == sIFDIR:
			return Attr{}, unix.EISDIR
		case n.typ != sIFREG:
			return Attr{}, unix.EINVAL
		}
		if err := checkExtent(0, *in.Size); err != nil {
			return Attr{}, err
		}
	}
	f.begin()
	defer f.end()
	n.mu.Lock()
	defer n.mu.Unlock()
	f.table.mu.RLock()
	defer f.table.mu.RUnlock()
	p, named := f.table.path(n)
	fd := -1
	if in.Handle != nil {
		fd = in.Handle.fd
	} else if !named {
		if fd = f.table.anyFd(n); fd < 0 {
			return Attr{}, ErrStale
		}
	}
	if err := f.setattrKill(n, fd, p, in); err != nil {
		return Attr{}, err
	}
	if in.Size != nil {
		if err := f.truncate(fd, p, *in.Size); err != nil {
			return Attr{}, f.fail("truncate", err)
		}
		if f.captures(n) {
			f.truncateLog(n, *in.Size)
		}
	}
	if err := f.setattrOwner(n, fd, p, in); err != nil {
		return Attr{}, err
	}
	if err := f.setattrMode(n, fd, p, in); err != nil {
		return Attr{}, err
	}
	if err := f.setattrTimes(n, fd, p, in); err != nil {
		return Attr{}, err
	}
	var st unix.Stat_t
	if err := f.statAt(fd, p, &st); err != nil {
		return Attr{}, f.fail("stat", err)
	}
	if in.Size != nil && in.Mtime == nil && !in.MtimeNow {
		f.mtimeLog(n, &st) // the truncate set it
	}
	return attrFromStat(&st), nil
}

// setattrKill clears the set-user-ID and set-group-ID bits a write or a
// chown kills, and makes the chown that asks for it.
func (f *FS) setattrKill(n *Node, fd int, p string, in SetattrIn) error {
	if in.KillPriv != nil {
		// An open(O_TRUNC) truncates with no handle: the file is named.
		// The kernel asks a chown to kill privileges whoever the caller.
		cause := killWrite
		if in.UID != nil || in.GID != nil {
			cause = killChown
		}
		if _, err := f.killPrivAt(n, fd, p, in.KillPriv, cause); err != nil {
			return err
		}
	}
	if in.Chowned != nil && n.typ != sIFDIR {
		if _, err := f.killPrivAt(n, fd, p, in.Chowned, killChown); err != nil {
			return err
		}
	}
	if in.Chowned != nil {
		// The chown itself, which changes nothing but the ctime (not
		// replicated) on the backing file, as on a local file system;
		// the bits it would clear as root are cleared above already.
		var err error
		if fd >= 0 {
			err = unix.Fchown(fd, -1, -1)
		} else {
			err = unix.Fchownat(f.root, p, -1, -1, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return f.fail("chown", err)
		}
	}
	return nil
}

// setattrOwner changes the owner or the group, and records it.
func (f *FS) setattrOwner(n *Node, fd int, p string, in SetattrIn) error {
	if in.UID != nil || in.GID != nil {
		uid, gid := journal.NoID, journal.NoID
		if in.UID != nil {
			uid = *in.UID
		}
		if in.GID != nil {
			gid = *in.GID
		}
		var err error
		if fd >= 0 {
			err = unix.Fchown(fd, int(int32(uid)), int(int32(gid)))
		} else {
			err = unix.Fchownat(f.root, p, int(int32(uid)), int(int32(gid)), unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return f.fail("chown", err)
		}
		if f.captures(n) {
			f.metaLog(n, journal.Op{Kind: journal.KindChown, UID: uid, GID: gid})
		}
	}
	return nil
}

// setattrMode changes the permission bits (not of a symlink, which has
// none of its own), and records it.
func (f *FS) setattrMode(n *Node, fd int, p string, in SetattrIn) error {
	if in.Mode != nil && n.typ != sIFLNK {
		mode := *in.Mode & 0o7777
		var err error
		if fd >= 0 {
			err = unix.Fchmod(fd, mode)
		} else {
			err = unix.Fchmodat(f.root, p, mode, 0)
		}
		if err != nil {
			return f.fail("chmod", err)
		}
		if f.captures(n) {
			f.metaLog(n, journal.Op{Kind: journal.KindChmod, Mode: mode})
		}
	}
	return nil
}

// setattrTimes sets the access and modification times, and records them.
func (f *FS) setattrTimes(n *Node, fd int, p string, in SetattrIn) error {
	if in.Atime != nil || in.Mtime != nil || in.AtimeNow || in.MtimeNow {
		now := time.Now()
		at, mt := timeArg(in.Atime, in.AtimeNow, now), timeArg(in.Mtime, in.MtimeNow, now)
		ts := []unix.Timespec{timespec(at), timespec(mt)}
		var err error
		if fd >= 0 {
			err = unix.UtimesNanoAt(unix.AT_FDCWD, f.fdPath(fd), ts, 0)
		} else {
			err = unix.UtimesNanoAt(f.root, p, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return f.fail("utimens", err)
		}
		if f.captures(n) {
			f.metaLog(n, journal.Op{Kind: journal.KindUtimens, Atime: at, Mtime: mt})
		}
	}
	return nil
}
