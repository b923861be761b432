package journal

import (
	"encoding/binary"
	"fmt"
)

// appendBody appends the uncompressed body encoding of ops to dst.
// Each op is its kind byte, the fid as a uvarint, then the kind's fields
// (docs/FORMAT.md): integers as uvarints (times as zig-zag varints),
// strings and byte slices as a uvarint length followed by the bytes.
func appendBody(dst []byte, ops []Op) []byte {
	for i := range ops {
		op := &ops[i]
		dst = append(dst, byte(op.Kind))
		dst = binary.AppendUvarint(dst, op.Fid)
		dst = appendStr(dst, op.Path)
		switch op.Kind {
		case KindCreate, KindMkdir:
			dst = appendU(dst, uint64(op.Mode), uint64(op.UID), uint64(op.GID))
		case KindMknod:
			dst = appendU(dst, uint64(op.Mode), op.Rdev, uint64(op.UID), uint64(op.GID))
		case KindSymlink:
			dst = appendStr(dst, op.Target)
			dst = appendU(dst, uint64(op.UID), uint64(op.GID))
		case KindLink:
			dst = appendStr(dst, op.Path2)
		case KindRename:
			dst = appendStr(dst, op.Path2)
			dst = appendU(dst, uint64(op.Flags))
		case KindWrite:
			dst = appendU(dst, op.Offset)
			dst = appendBytes(dst, op.Data)
		case KindTruncate:
			dst = appendU(dst, op.Size)
		case KindChmod:
			dst = appendU(dst, uint64(op.Mode))
		case KindChown:
			dst = appendU(dst, uint64(op.UID), uint64(op.GID))
		case KindUtimens:
			dst = binary.AppendVarint(dst, op.Atime)
			dst = binary.AppendVarint(dst, op.Mtime)
		case KindSetxattr:
			dst = appendStr(dst, op.Name)
			dst = appendBytes(dst, op.Data)
			dst = appendU(dst, uint64(op.Flags))
		case KindRemovexattr:
			dst = appendStr(dst, op.Name)
		case KindFallocate:
			dst = appendU(dst, uint64(op.Flags), op.Offset, op.Size)
		}
	}
	return dst
}

func appendU(dst []byte, vs ...uint64) []byte {
	for _, v := range vs {
		dst = binary.AppendUvarint(dst, v)
	}
	return dst
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// reader decodes a body, remembering the first error.
type reader struct {
	buf []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("at body offset %d: "+format+": %w", append([]any{r.off}, append(args, ErrCorrupt)...)...)
	}
}

func (r *reader) byte() byte {
	if r.err != nil || r.off >= len(r.buf) {
		r.fail("truncated")
		return 0
	}
	b := r.buf[r.off]
	r.off++
	return b
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf[r.off:])
	if n <= 0 {
		r.fail("bad uvarint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.buf[r.off:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) u32() uint32 {
	v := r.uvarint()
	if v > 0xFFFFFFFF {
		r.fail("value %d overflows 32 bits", v)
	}
	return uint32(v)
}

func (r *reader) bytes(max int) []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(max) || n > uint64(len(r.buf)-r.off) {
		r.fail("length %d exceeds limit or remaining body", n)
		return nil
	}
	b := r.buf[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return b
}

func (r *reader) path() string {
	p := string(r.bytes(MaxPath))
	if r.err == nil && !ValidPath(p) {
		r.fail("invalid path %q", p)
	}
	return p
}

// parseBody decodes count ops. With keep false it only validates.
func parseBody(body []byte, count int, keep bool) ([]Op, error) {
	r := &reader{buf: body}
	var ops []Op
	if keep {
		ops = make([]Op, 0, min(count, len(body)/3+1))
	}
	for i := 0; i < count; i++ {
		var op Op
		op.Kind = Kind(r.byte())
		if r.err == nil && (op.Kind == 0 || op.Kind > kindMax) {
			r.fail("op %d: unknown kind %d", i, op.Kind)
		}
		op.Fid = r.uvarint()
		op.Path = r.path()
		switch op.Kind {
		case KindCreate, KindMkdir:
			op.Mode, op.UID, op.GID = r.u32(), r.u32(), r.u32()
		case KindMknod:
			op.Mode = r.u32()
			op.Rdev = r.uvarint()
			op.UID, op.GID = r.u32(), r.u32()
		case KindSymlink:
			op.Target = string(r.bytes(MaxPath))
			op.UID, op.GID = r.u32(), r.u32()
		case KindLink:
			op.Path2 = r.path()
		case KindRename:
			op.Path2 = r.path()
			op.Flags = r.u32()
		case KindWrite:
			op.Offset = r.uvarint()
			op.Data = r.bytes(MaxBodySize)
		case KindTruncate:
			op.Size = r.uvarint()
		case KindChmod:
			op.Mode = r.u32()
		case KindChown:
			op.UID, op.GID = r.u32(), r.u32()
		case KindUtimens:
			op.Atime, op.Mtime = r.varint(), r.varint()
		case KindSetxattr:
			op.Name = string(r.bytes(MaxXattrName))
			op.Data = r.bytes(MaxXattrSize)
			op.Flags = r.u32()
		case KindRemovexattr:
			op.Name = string(r.bytes(MaxXattrName))
		case KindFallocate:
			op.Flags = r.u32()
			op.Offset, op.Size = r.uvarint(), r.uvarint()
		}
		if r.err != nil {
			return nil, r.err
		}
		if err := op.Check(); err != nil {
			return nil, fmt.Errorf("op %d: %w: %w", i, err, ErrCorrupt)
		}
		if keep {
			ops = append(ops, op)
		}
	}
	if r.off != len(body) {
		return nil, fmt.Errorf("%d trailing bytes after %d ops: %w", len(body)-r.off, count, ErrCorrupt)
	}
	return ops, nil
}
