package capture

import (
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// What the capture core applies, the journal must record and a backup
// must apply (invariant 7). Every mutation is checked against what the
// journal format can carry before it touches the backing directory, and
// refused with the errno a file system without that feature gives: an op
// applied but not journaled would leave the backups differing for good,
// and one journaled but not encodable would wedge every barrier after it.
// The kernel already refuses most of these; the checks make the contract
// the capture core's own, whatever sends the request.

// renameFlags are the renameat2 flags pbfs replicates. RENAME_WHITEOUT is
// recorded as a rename and the creation of the whiteout (a 0:0 character
// device) at the source.
const renameFlags = unix.RENAME_NOREPLACE | unix.RENAME_EXCHANGE | unix.RENAME_WHITEOUT

// fallocModes are the fallocate(2) modes FUSE passes on, all idempotent
// (a backup redoing one after a crash gets the same file): COLLAPSE_RANGE
// and INSERT_RANGE shift data and are refused, as the kernel refuses them
// on FUSE.
const fallocModes = journal.FallocKeepSize | journal.FallocPunchHole | journal.FallocZeroRange

// checkName refuses a name no directory entry can have.
func checkName(name string) error {
	switch {
	case len(name) > 255:
		return unix.ENAMETOOLONG
	case name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00"):
		return unix.EINVAL
	}
	return nil
}

func checkRenameFlags(flags uint32) error {
	if flags&^renameFlags != 0 || flags&unix.RENAME_EXCHANGE != 0 && flags&(unix.RENAME_NOREPLACE|unix.RENAME_WHITEOUT) != 0 {
		return unix.EINVAL
	}
	return nil
}

// checkExtent refuses a write, truncate or fallocate reaching past the
// largest offset the journal records.
func checkExtent(off, length uint64) error {
	if off > journal.MaxFileSize || length > journal.MaxFileSize-off {
		return unix.EFBIG
	}
	return nil
}

func checkFallocate(mode uint32, off, length uint64) error {
	switch {
	case mode&^fallocModes != 0:
		return unix.EOPNOTSUPP
	case mode&unix.FALLOC_FL_PUNCH_HOLE != 0 && (mode&unix.FALLOC_FL_KEEP_SIZE == 0 || mode&unix.FALLOC_FL_ZERO_RANGE != 0):
		return unix.EOPNOTSUPP
	case length == 0:
		return unix.EINVAL
	}
	return checkExtent(off, length)
}

// checkXattr refuses what setxattr(2) itself refuses, and what the
// journal cannot carry.
func checkXattr(name string, value []byte, flags int) error {
	switch {
	case uint32(flags)&^(journal.XattrCreate|journal.XattrReplace) != 0:
		return unix.EINVAL
	case name == "" || len(name) > journal.MaxXattrName || strings.IndexByte(name, 0) >= 0:
		return unix.ERANGE
	case len(value) > journal.MaxXattrSize:
		return unix.E2BIG
	}
	return nil
}

// checkMknod refuses a type mknod(2) cannot make.
func checkMknod(mode uint32) error {
	switch mode & unix.S_IFMT {
	case 0, unix.S_IFREG, unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO, unix.S_IFSOCK:
		return nil
	}
	return unix.EINVAL
}
