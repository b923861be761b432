package capture

import (
	"time"

	"golang.org/x/sys/unix"
)

// Attr is a file's attributes as stat(2) reports them.
type Attr struct {
	Ino     uint64
	Size    uint64
	Blocks  uint64
	Mode    uint32 // st_mode: type and permission bits
	Nlink   uint32
	UID     uint32
	GID     uint32
	Rdev    uint64
	Blksize uint32
	Atime   time.Time
	Mtime   time.Time
	Ctime   time.Time
}

// IsDir reports whether the attributes describe a directory.
func (a *Attr) IsDir() bool { return a.Mode&unix.S_IFMT == unix.S_IFDIR }

func attrFromStat(st *unix.Stat_t) Attr {
	return Attr{
		Ino:     st.Ino,
		Size:    uint64(st.Size),
		Blocks:  uint64(st.Blocks),
		Mode:    st.Mode,
		Nlink:   uint32(st.Nlink),
		UID:     st.Uid,
		GID:     st.Gid,
		Rdev:    st.Rdev,
		Blksize: uint32(st.Blksize),
		Atime:   time.Unix(st.Atim.Unix()),
		Mtime:   time.Unix(st.Mtim.Unix()),
		Ctime:   time.Unix(st.Ctim.Unix()),
	}
}

// Access checks access(2)'s mask (R_OK, W_OK, X_OK; 0 for existence)
// for n with pbfs's own credentials; symlinks are checked, not followed.
func (f *FS) Access(n *Node, mask uint32) error {
	f.table.mu.RLock()
	defer f.table.mu.RUnlock()
	p, err := f.nodePath(n)
	if err != nil {
		return err
	}
	err = unix.Faccessat(f.root, p, mask&(unix.R_OK|unix.W_OK|unix.X_OK), unix.AT_EACCESS|unix.AT_SYMLINK_NOFOLLOW)
	return f.fail("access", err)
}

// Caller is the process a request comes from.
type Caller struct {
	UID, GID uint32
	PID      uint32 // 0: unknown (its supplementary groups are then not read)
	Umask    uint32 // for a create-kind request: the caller's umask
}

// SetattrIn says which attributes a Setattr changes.
type SetattrIn struct {
	Mode     *uint32 // permission bits (and setuid, setgid, sticky)
	UID, GID *uint32
	Size     *uint64
	Atime    *time.Time // nil: leave; zero Time with AtimeNow: now
	Mtime    *time.Time
	AtimeNow bool
	MtimeNow bool
	Handle   *Handle // set when the kernel names an open file
	KillPriv *Caller // clear setuid/setgid and capabilities for this caller
	// Chowned: a chown that changes neither owner nor group, by this
	// caller, which still clears setuid, setgid and capabilities as any
	// chown of a file does (chown_common).
	Chowned *Caller
}

// Dirent is one directory entry.
type Dirent struct {
	Ino  uint64
	Type uint8 // DT_* as getdents reports
	Name string
}
