package capture

import (
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// pbfs writes as root, so the backing file system never clears setuid,
// setgid or file capabilities on its own: capture does, as a local file
// system would for the caller, and records each change. The kernel asks
// (FUSE_WRITE_KILL_SUIDGID, FATTR_KILL_SUIDGID, FUSE_OPEN_KILL_SUIDGID)
// for every write, truncate and O_TRUNC open by a caller without
// CAP_FSETID, so this is on the write path of any service that does not
// run as root: it costs one fstat when there is nothing to clear.

// killPriv clears setuid and removes security.capability, recording what
// it changed, as the kernel does for a writer c without CAP_FSETID. It
// clears setgid too if the file is group-executable, or if c is not in
// the file's group (a setgid file without group execute is otherwise left
// alone: setattr_should_drop_sgid). The caller holds n.mu and sealMu.
//
// It reports whether the mode changed: the kernel's cached attributes
// then no longer hold, and the binding invalidates them (Handle.Cleared).
func (f *FS) killPriv(n *Node, fd int, c *Caller) (bool, error) {
	return f.killPrivAt(n, fd, "", c, killWrite)
}

// killCause is what clears the privileges, for killPrivAt.
type killCause uint8

const (
	// killWrite: a write, truncate or O_TRUNC open the kernel asked to
	// kill privileges for (it has checked CAP_FSETID); regular files only.
	killWrite killCause = iota
	// killFallocate: as killWrite, but CAP_FSETID is asked here first
	// (the kernel has not), only once there is something to clear.
	killFallocate
	// killChown: a chown, by any caller, which clears setuid of every
	// file but a directory: a FIFO, socket or device too (chown_common).
	// It clears setgid by setattr_should_drop_sgid: with group execute,
	// or if the caller is neither in the file's group nor holds
	// CAP_FSETID (root chowning a -rwSr-Sr-- file keeps its setgid).
	// pbfs's own chown, as root, would clear them on the backing file
	// unrecorded.
	killChown
)

// killPrivAt is killPriv on fd, or, with fd -1, on the file at path p,
// for the cause given.
func (f *FS) killPrivAt(n *Node, fd int, p string, c *Caller, cause killCause) (bool, error) {
	var st unix.Stat_t
	if err := f.statAt(fd, p, &st); err != nil {
		return false, f.fail("killpriv", err)
	}
	switch t := st.Mode & unix.S_IFMT; {
	case t == unix.S_IFDIR || t == unix.S_IFLNK:
		return false, nil
	case t != unix.S_IFREG && cause != killChown:
		return false, nil
	}
	mode := st.Mode & 0o7777
	kill := mode &^ unix.S_ISUID
	if mode&unix.S_ISGID != 0 && dropSetgid(mode, st.Gid, c, cause) {
		kill &^= unix.S_ISGID
	}
	caps := !n.noCaps.Load()
	if kill == mode && !caps {
		return false, nil
	}
	if cause == killFallocate && c.mayKeepSetid() {
		return false, nil
	}
	if kill != mode {
		if err := f.chmodAt(n, fd, p, kill); err != nil {
			return false, f.fail("killpriv", err)
		}
	}
	if caps {
		var err error
		if fd >= 0 {
			err = unix.Fremovexattr(fd, capsXattr)
		} else {
			err = f.entryName(p, func(name string) error { return unix.Lremovexattr(name, capsXattr) })
		}
		switch {
		case err == nil && f.captures(n):
			f.metaLog(n, journal.Op{Kind: journal.KindRemovexattr, Name: capsXattr})
		case errors.Is(err, unix.ENODATA):
			// None: later writes skip the call (a set through the mount
			// clears the mark first, under n.mu as here).
			n.noCaps.Store(true)
		}
	}
	return kill != mode, nil
}

// dropSetgid is the kernel's setattr_should_drop_sgid for a setgid file
// of mode and group gid: group execute, or a caller c neither in the
// group nor holding CAP_FSETID. For a write or truncate the kernel asks
// only for callers without CAP_FSETID, and a fallocate checks it first,
// so only a chown reads the capability here.
func dropSetgid(mode, gid uint32, c *Caller, cause killCause) bool {
	if mode&unix.S_IXGRP != 0 {
		return true
	}
	return !c.inGroup(gid) && (cause != killChown || !c.mayKeepSetid())
}

// clearSetgid clears n's setgid bit, at p, and records the chmod. The
// caller holds n.mu and table.mu.
func (f *FS) clearSetgid(n *Node, p string) error {
	var st unix.Stat_t
	if err := f.statAt(-1, p, &st); err != nil {
		return f.fail("setxattr", err)
	}
	if st.Mode&unix.S_ISGID == 0 || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil
	}
	if err := f.chmodAt(n, -1, p, st.Mode&0o7777&^unix.S_ISGID); err != nil {
		return f.fail("setxattr", err)
	}
	return nil
}

// statAt stats fd, or, with fd -1, the entry at path p.
func (f *FS) statAt(fd int, p string, st *unix.Stat_t) error {
	if fd >= 0 {
		return unix.Fstat(fd, st)
	}
	return unix.Fstatat(f.root, p, st, unix.AT_SYMLINK_NOFOLLOW)
}

// chmodAt sets the mode of fd, or, with fd -1, of p (not a symlink), and
// records it.
func (f *FS) chmodAt(n *Node, fd int, p string, mode uint32) error {
	var err error
	if fd >= 0 {
		err = unix.Fchmod(fd, mode)
	} else {
		err = unix.Fchmodat(f.root, p, mode, 0)
	}
	if err == nil && f.captures(n) {
		f.metaLog(n, journal.Op{Kind: journal.KindChmod, Mode: mode})
	}
	return err
}

// capFsetid is CAP_FSETID's bit in a capability set.
const capFsetid = 1 << 4

// mayKeepSetid reports whether c holds CAP_FSETID (its effective set, from
// /proc), which lets a write keep setuid and setgid. An unknown caller is
// judged by its uid.
func (c *Caller) mayKeepSetid() bool {
	hex, ok := c.status("CapEff")
	if !ok {
		return c.UID == 0
	}
	caps, err := strconv.ParseUint(hex, 16, 64)
	return err == nil && caps&capFsetid != 0
}

// inGroup reports whether c is in group gid: its own group, or one of its
// supplementary groups (from /proc; a caller that is gone, or unknown, is
// judged by its own group alone). A nil caller is taken to be in it.
func (c *Caller) inGroup(gid uint32) bool {
	if c == nil || c.GID == gid {
		return true
	}
	groups, _ := c.status("Groups")
	for _, g := range strings.Fields(groups) {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil && uint32(n) == gid {
			return true
		}
	}
	return false
}

// status reads field key of the caller's /proc/PID/status; false if the
// caller is unknown or gone.
func (c *Caller) status(key string) (string, bool) {
	if c.PID == 0 {
		return "", false
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(c.PID), 10) + "/status")
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}
