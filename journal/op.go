package journal

import (
	"errors"
	"fmt"
	"strings"
)

// Kind says which mutation an Op records.
type Kind uint8

// Op kinds. The numbers are part of the on-disk format (docs/FORMAT.md).
const (
	KindCreate      Kind = 1  // new regular file: Path, Mode, UID, GID
	KindMknod       Kind = 2  // new device, fifo or socket: Path, Mode (with type bits), Rdev, UID, GID
	KindMkdir       Kind = 3  // new directory: Path, Mode, UID, GID
	KindSymlink     Kind = 4  // new symlink Path pointing at Target: UID, GID
	KindLink        Kind = 5  // hard link: existing Path, new Path2
	KindUnlink      Kind = 6  // remove a non-directory: Path
	KindRmdir       Kind = 7  // remove an empty directory: Path
	KindRename      Kind = 8  // rename Path to Path2 with renameat2 Flags
	KindWrite       Kind = 9  // write Data at Offset of Path
	KindTruncate    Kind = 10 // set the size of Path to Size
	KindChmod       Kind = 11 // set the permission bits of Path to Mode
	KindChown       Kind = 12 // set owner of Path (not following symlinks); NoID leaves one unchanged
	KindUtimens     Kind = 13 // set Atime and Mtime of Path (not following symlinks); OmitTime leaves one unchanged
	KindSetxattr    Kind = 14 // set extended attribute Name of Path to Data with setxattr Flags
	KindRemovexattr Kind = 15 // remove extended attribute Name of Path
	KindFallocate   Kind = 16 // fallocate(2) Path with Flags (mode), Offset and Size (length)
	kindMax         Kind = KindFallocate
)

// Rename flags, as renameat2(2) takes them.
const (
	RenameNoReplace uint32 = 1 << 0
	RenameExchange  uint32 = 1 << 1
)

// fallocate(2) modes a fallocate op may carry: the ones FUSE passes on,
// each of which gives the same file when run twice.
const (
	FallocKeepSize  uint32 = 0x01
	FallocPunchHole uint32 = 0x02
	FallocZeroRange uint32 = 0x10
	fallocModes            = FallocKeepSize | FallocPunchHole | FallocZeroRange
)

// setxattr(2) flags a setxattr op may carry.
const (
	XattrCreate  uint32 = 1
	XattrReplace uint32 = 2
)

// NoID in Op.UID or Op.GID of a chown leaves that id unchanged.
const NoID = ^uint32(0)

// OmitTime in Op.Atime or Op.Mtime of a utimens leaves that time unchanged.
const OmitTime = int64(-1) << 62

var kindNames = [...]string{
	KindCreate: "create", KindMknod: "mknod", KindMkdir: "mkdir", KindSymlink: "symlink",
	KindLink: "link", KindUnlink: "unlink", KindRmdir: "rmdir", KindRename: "rename",
	KindWrite: "write", KindTruncate: "truncate", KindChmod: "chmod", KindChown: "chown",
	KindUtimens: "utimens", KindSetxattr: "setxattr", KindRemovexattr: "removexattr",
	KindFallocate: "fallocate",
}

// String returns the kind's lowercase name.
func (k Kind) String() string {
	if k == 0 || k > kindMax {
		return fmt.Sprintf("kind(%d)", uint8(k))
	}
	return kindNames[k]
}

// Kinds lists every op kind in numeric order.
func Kinds() []Kind {
	out := make([]Kind, 0, kindMax)
	for k := Kind(1); k <= kindMax; k++ {
		out = append(out, k)
	}
	return out
}

// Op is one captured mutation. Paths are relative to the volume root, use
// "/" as separator and "." for the root itself; they name the file as it is
// at the op's place in the batch.
type Op struct {
	Kind   Kind
	Fid    uint64 // stable file id (the backing inode number) of the file acted on
	Path   string
	Path2  string // link and rename: the new name
	Target string // symlink target
	Name   string // xattr name
	Data   []byte // write data or xattr value
	Offset uint64
	Size   uint64 // truncate size, fallocate length
	Mode   uint32
	UID    uint32
	GID    uint32
	Rdev   uint64
	Flags  uint32 // rename, setxattr and fallocate flags
	Atime  int64  // nanoseconds since the Unix epoch, or OmitTime
	Mtime  int64

	// Fields below are known at capture time only and are not encoded.

	// Parent and Parent2 are the fids of the directories holding Path and Path2.
	Parent, Parent2 uint64
	// Fid2 is, for a rename, the file that Path2 named before (replaced or,
	// with RenameExchange, exchanged); 0 if none.
	Fid2 uint64
}

// IsNamespace reports whether the op changes the directory tree (and so
// keeps its place in the batch) rather than one file's data or metadata.
func (k Kind) IsNamespace() bool { return k >= KindCreate && k <= KindRename }

// creates reports whether the op brings a new file into existence.
func (k Kind) creates() bool { return k >= KindCreate && k <= KindSymlink }

// String renders the op on one line, for `pbfs journal show`.
func (op *Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-11s fid=%d %q", op.Kind, op.Fid, op.Path)
	switch op.Kind {
	case KindCreate, KindMkdir:
		fmt.Fprintf(&b, " mode=%#o uid=%d gid=%d", op.Mode, op.UID, op.GID)
	case KindMknod:
		fmt.Fprintf(&b, " mode=%#o rdev=%d uid=%d gid=%d", op.Mode, op.Rdev, op.UID, op.GID)
	case KindSymlink:
		fmt.Fprintf(&b, " -> %q uid=%d gid=%d", op.Target, op.UID, op.GID)
	case KindLink:
		fmt.Fprintf(&b, " as %q", op.Path2)
	case KindRename:
		fmt.Fprintf(&b, " to %q flags=%#x", op.Path2, op.Flags)
	case KindWrite:
		fmt.Fprintf(&b, " off=%d len=%d", op.Offset, len(op.Data))
	case KindTruncate:
		fmt.Fprintf(&b, " size=%d", op.Size)
	case KindChmod:
		fmt.Fprintf(&b, " mode=%#o", op.Mode)
	case KindChown:
		fmt.Fprintf(&b, " uid=%d gid=%d", int32(op.UID), int32(op.GID))
	case KindUtimens:
		fmt.Fprintf(&b, " atime=%s mtime=%s", fmtTime(op.Atime), fmtTime(op.Mtime))
	case KindSetxattr:
		fmt.Fprintf(&b, " name=%q len=%d flags=%#x", op.Name, len(op.Data), op.Flags)
	case KindRemovexattr:
		fmt.Fprintf(&b, " name=%q", op.Name)
	case KindFallocate:
		fmt.Fprintf(&b, " mode=%#x off=%d len=%d", op.Flags, op.Offset, op.Size)
	}
	return b.String()
}

func fmtTime(ns int64) string {
	if ns == OmitTime {
		return "omit"
	}
	return fmt.Sprintf("%d.%09d", ns/1e9, ns%1e9)
}

// ValidPath reports whether p is a path an op may carry: "." or a clean,
// relative, slash-separated path without "." or ".." components, NUL bytes
// or components longer than 255 bytes. Every decoder and the applier check it.
func ValidPath(p string) bool {
	if p == "." {
		return true
	}
	if p == "" || len(p) > MaxPath || p[0] == '/' || strings.IndexByte(p, 0) >= 0 {
		return false
	}
	for {
		i := strings.IndexByte(p, '/')
		c := p
		if i >= 0 {
			c = p[:i]
		}
		if c == "" || c == "." || c == ".." || len(c) > 255 {
			return false
		}
		if i < 0 {
			return true
		}
		p = p[i+1:]
	}
}

// ErrInvalidOp marks an op that no decoder would accept.
var ErrInvalidOp = errors.New("invalid op")

// Check reports whether the op is well formed: known kind, valid paths,
// names and sizes within the limits, known flags. Encode refuses what
// Check refuses, and so does every decoder.
func (op *Op) Check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s: "+format+": %w", append(append([]any{op.Kind}, a...), ErrInvalidOp)...)
	}
	if op.Kind == 0 || op.Kind > kindMax {
		return bad("unknown kind")
	}
	if !ValidPath(op.Path) {
		return bad("path %q", op.Path)
	}
	switch op.Kind {
	case KindLink, KindRename:
		if !ValidPath(op.Path2) {
			return bad("path %q", op.Path2)
		}
		if op.Flags&^(RenameNoReplace|RenameExchange) != 0 || op.Flags == RenameNoReplace|RenameExchange {
			return bad("flags %#x", op.Flags)
		}
	case KindSymlink:
		if op.Target == "" || len(op.Target) > MaxPath || strings.IndexByte(op.Target, 0) >= 0 {
			return bad("symlink target of %d bytes", len(op.Target))
		}
	case KindSetxattr, KindRemovexattr:
		if op.Name == "" || len(op.Name) > MaxXattrName || strings.IndexByte(op.Name, 0) >= 0 {
			return bad("xattr name %q", op.Name)
		}
		if len(op.Data) > MaxXattrSize {
			return bad("xattr value of %d bytes", len(op.Data))
		}
		if op.Kind == KindSetxattr && op.Flags&^(XattrCreate|XattrReplace) != 0 {
			return bad("setxattr flags %#x", op.Flags)
		}
	case KindFallocate:
		if op.Flags&^fallocModes != 0 {
			return bad("fallocate mode %#x", op.Flags)
		}
		fallthrough
	case KindWrite, KindTruncate:
		if op.Offset > MaxFileSize || op.Size > MaxFileSize {
			return bad("offset %d size %d", op.Offset, op.Size)
		}
	}
	if op.Kind.IsNamespace() && op.Path == "." {
		return bad("the root has no name")
	}
	return nil
}

// Limits that decoders enforce.
//
// MaxPath is PATH_MAX (4096) less the NUL that ends a path passed to a
// syscall: the longest path, relative to the volume root, one syscall
// takes. The capture addresses every file by that path, relative to the
// backing root, in one *at syscall, and so does a backup applying an op;
// the kernel walks to deeper files through the mount (relative to a
// directory), but neither side could reach them. A symlink's target has
// the same limit in symlink(2).
const (
	MaxPath      = 4095
	MaxXattrName = 255
	MaxXattrSize = 64 << 10
	MaxFileSize  = 1 << 62
)
