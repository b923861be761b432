package apply

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/mountinfo"
)

// A copy holds whatever the primary's volume holds: setuid and setgid
// files, files with capabilities, device nodes. On the primary they act
// only through its FUSE mount, which the kernel mounts nosuid and nodev; a
// backup's copy is a plain directory, where a setuid-root file would run
// as root for any user who can reach it, and a device node would open the
// device. So while a backup serves a copy, the copy is mounted over itself
// nosuid,nodev (a bind mount): what a batch creates there cannot raise a
// user's privileges or reach a device. A promoted node's FUSE mount goes
// on top of it.

// ErrUnguarded: a copy could not be mounted nosuid,nodev.
var ErrUnguarded = errors.New("cannot mount the copy nosuid,nodev")

// CopyGuard is a copy's nosuid,nodev bind mount.
type CopyGuard struct {
	dir   string
	owned bool // this guard mounted it, or adopted one a killed backup left
	// How, in words: "mounted", "adopted" (left by a backup that was
	// killed) or "not needed" (the copy's file system is already
	// nosuid,nodev).
	How string
}

// GuardCopy mounts dir over itself nosuid,nodev, unless its file system
// already is. A guard a killed backup left (a bind mount of dir on itself,
// nosuid,nodev) is adopted, not stacked.
func GuardCopy(dir string) (*CopyGuard, error) {
	dir, err := filepath.Abs(dir)
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("guard copy: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, fmt.Errorf("guard copy %s: %w", dir, err)
	}
	if st.Flags&unix.ST_NOSUID != 0 && st.Flags&unix.ST_NODEV != 0 {
		if selfBound(dir) {
			return &CopyGuard{dir: dir, owned: true, How: "adopted"}, nil
		}
		return &CopyGuard{dir: dir, How: "not needed"}, nil
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return nil, fmt.Errorf("guard copy %s: bind: %w: %w", dir, err, ErrUnguarded)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV)
	for _, f := range [...]struct{ st, ms uintptr }{
		{unix.ST_RDONLY, unix.MS_RDONLY}, {unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	if err := unix.Mount("", dir, "", flags, ""); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		return nil, fmt.Errorf("guard copy %s: remount nosuid,nodev: %w: %w", dir, err, ErrUnguarded)
	}
	return &CopyGuard{dir: dir, owned: true, How: "mounted"}, nil
}

// selfBound reports whether the mount at dir is dir's own file system
// bound onto it: the guard a backup leaves when it is killed.
func selfBound(dir string) bool {
	tab, err := mountinfo.Read()
	if err != nil {
		return false
	}
	top, ok := tab.At(dir)
	if !ok || dir == "/" {
		return false
	}
	// The mount dir sits on, without the one at dir.
	var below mountinfo.Table
	for _, m := range tab {
		if m != top {
			below = append(below, m)
		}
	}
	dev, p := below.FSPath(dir)
	return dev == top.Dev && p == top.Root
}

// Release unmounts the guard if this process mounted or adopted it.
func (g *CopyGuard) Release() error {
	if g == nil || !g.owned {
		return nil
	}
	g.owned = false
	err := unix.Unmount(g.dir, 0)
	if errors.Is(err, unix.EBUSY) {
		// Something holds a file of the copy open, or stands in it.
		err = unix.Unmount(g.dir, unix.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("release copy guard %s: %w", g.dir, err)
	}
	return nil
}
