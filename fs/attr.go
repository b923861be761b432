package fs

import (
	"os"
	"time"

	"bazil.org/fuse"
	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/capture"
)

// cacheValid is how long the kernel may cache names and attributes. Every
// change goes through this mount, so the kernel's copy only goes stale
// through other names of a hard-linked file, which share one node id, and
// through an answer that crosses a change of a directory's entries or a
// fallocate, which attrsChanged takes care of.
const cacheValid = time.Second

func fuseAttr(a capture.Attr) fuse.Attr {
	return fuse.Attr{
		Valid:     cacheValid,
		Inode:     a.Ino,
		Size:      a.Size,
		Blocks:    a.Blocks,
		Atime:     a.Atime,
		Mtime:     a.Mtime,
		Ctime:     a.Ctime,
		Mode:      fileMode(a.Mode),
		Nlink:     a.Nlink,
		Uid:       a.UID,
		Gid:       a.GID,
		Rdev:      uint32(a.Rdev),
		BlockSize: a.Blksize,
	}
}

// fileMode converts a st_mode to an os.FileMode.
func fileMode(m uint32) os.FileMode {
	fm := os.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		fm |= os.ModeDir
	case unix.S_IFLNK:
		fm |= os.ModeSymlink
	case unix.S_IFIFO:
		fm |= os.ModeNamedPipe
	case unix.S_IFSOCK:
		fm |= os.ModeSocket
	case unix.S_IFCHR:
		fm |= os.ModeDevice | os.ModeCharDevice
	case unix.S_IFBLK:
		fm |= os.ModeDevice
	}
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

// unixMode converts an os.FileMode from a request back to st_mode bits.
func unixMode(fm os.FileMode) uint32 {
	m := uint32(fm & 0o777)
	switch {
	case fm&os.ModeDir != 0:
		m |= unix.S_IFDIR
	case fm&os.ModeSymlink != 0:
		m |= unix.S_IFLNK
	case fm&os.ModeNamedPipe != 0:
		m |= unix.S_IFIFO
	case fm&os.ModeSocket != 0:
		m |= unix.S_IFSOCK
	case fm&os.ModeCharDevice != 0:
		m |= unix.S_IFCHR
	case fm&os.ModeDevice != 0:
		m |= unix.S_IFBLK
	default:
		m |= unix.S_IFREG
	}
	if fm&os.ModeSetuid != 0 {
		m |= unix.S_ISUID
	}
	if fm&os.ModeSetgid != 0 {
		m |= unix.S_ISGID
	}
	if fm&os.ModeSticky != 0 {
		m |= unix.S_ISVTX
	}
	return m
}

func entry(n *capture.Node, a capture.Attr) fuse.LookupResponse {
	return fuse.LookupResponse{Node: fuse.NodeID(n.ID()), EntryValid: cacheValid, Attr: fuseAttr(a)}
}
