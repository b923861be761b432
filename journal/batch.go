package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// Format constants. docs/FORMAT.md documents the layout they describe.
const (
	Magic         = "PBFS"
	FormatVersion = 1
	HeaderSize    = 64

	// FlagZstd marks a body stored zstd-compressed.
	FlagZstd uint16 = 1 << 0
	// FlagMore marks a batch whose seal continues in the next seq: one
	// seal too large for a single batch is stored as a group of batches,
	// every one but the last with FlagMore. Only the state after a whole
	// group is one the primary had, so appliers stop before a group whose
	// end they do not hold yet (docs/FORMAT.md).
	FlagMore   uint16 = 1 << 1
	knownFlags        = FlagZstd | FlagMore

	// MaxBodySize bounds the uncompressed body a decoder accepts.
	MaxBodySize = 512 << 20
	// MaxOps bounds the op count a decoder accepts.
	MaxOps = 1 << 24
)

// Errors that callers branch on.
var (
	ErrCorrupt  = errors.New("corrupt batch")
	ErrVersion  = errors.New("unsupported batch format version")
	ErrTooLarge = errors.New("batch too large")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is the fixed-size, uncompressed front of an encoded batch.
type Header struct {
	Version   uint16
	Flags     uint16
	Epoch     uint64
	Seq       uint64
	Created   time.Time
	OpCount   uint32
	RawLen    uint32 // uncompressed body length
	StoredLen uint32 // body length as stored (after compression)
	BodyCRC   uint32 // CRC-32C of the uncompressed body
	Prev      uint32 // Checksum of the batch before this one (0 for the first)
	Written   uint32 // bytes the service wrote in the batch, before coalescing (saturating)
	Checksum  uint32 // CRC-32C of header bytes 0..55 followed by the stored body
}

// Batch is a sealed set of ops with its place in the journal.
type Batch struct {
	Epoch   uint64
	Seq     uint64
	Created time.Time
	Prev    uint32
	Written uint64 // bytes the service wrote, before coalescing
	// More: the seal continues in the next batch (FlagMore).
	More bool
	Ops  []Op
}

// DataBytes sums the payload (write data and xattr values) the batch carries.
func (b *Batch) DataBytes() int {
	n := 0
	for i := range b.Ops {
		n += len(b.Ops[i].Data)
	}
	return n
}

// Encode seals b into its stored form: header, then the body, zstd-compressed
// from MinCompress bytes on.
func Encode(b *Batch) ([]byte, Header, error) {
	if len(b.Ops) > MaxOps {
		return nil, Header{}, fmt.Errorf("encode batch %d: %d ops: %w", b.Seq, len(b.Ops), ErrTooLarge)
	}
	for i := range b.Ops {
		if err := b.Ops[i].Check(); err != nil {
			return nil, Header{}, fmt.Errorf("encode batch %d op %d: %w", b.Seq, i, err)
		}
	}
	scratch := getRaw(256 + b.DataBytes())
	defer putRaw(scratch)
	raw := appendBody((*scratch)[:0], b.Ops)
	*scratch = raw
	if len(raw) > MaxBodySize {
		return nil, Header{}, fmt.Errorf("encode batch %d: %d bytes: %w", b.Seq, len(raw), ErrTooLarge)
	}
	out, flags := storeBody(raw)
	if b.More {
		flags |= FlagMore
	}
	h := Header{
		Version:   FormatVersion,
		Flags:     flags,
		Epoch:     b.Epoch,
		Seq:       b.Seq,
		Created:   b.Created,
		OpCount:   uint32(len(b.Ops)),
		RawLen:    uint32(len(raw)),
		StoredLen: uint32(len(out) - HeaderSize),
		BodyCRC:   crc32.Checksum(raw, castagnoli),
		Prev:      b.Prev,
		Written:   uint32(min(b.Written, 0xFFFFFFFF)),
	}
	putHeader(out[:HeaderSize], &h)
	h.Checksum = checksum(out)
	binary.LittleEndian.PutUint32(out[56:], h.Checksum)
	return out, h, nil
}

func putHeader(p []byte, h *Header) {
	copy(p[0:4], Magic)
	le := binary.LittleEndian
	le.PutUint16(p[4:], h.Version)
	le.PutUint16(p[6:], h.Flags)
	le.PutUint64(p[8:], h.Epoch)
	le.PutUint64(p[16:], h.Seq)
	le.PutUint64(p[24:], uint64(h.Created.UnixNano()))
	le.PutUint32(p[32:], h.OpCount)
	le.PutUint32(p[36:], h.RawLen)
	le.PutUint32(p[40:], h.StoredLen)
	le.PutUint32(p[44:], h.BodyCRC)
	le.PutUint32(p[48:], h.Prev)
	le.PutUint32(p[52:], h.Written)
	le.PutUint32(p[56:], h.Checksum)
	le.PutUint32(p[60:], 0)
}

// More reports whether the batch's seal continues in the next seq.
func (h *Header) More() bool { return h.Flags&FlagMore != 0 }

// checksum covers header bytes 0..55 and the stored body.
func checksum(buf []byte) uint32 {
	c := crc32.Checksum(buf[:56], castagnoli)
	return crc32.Update(c, castagnoli, buf[HeaderSize:])
}

// DecodeHeader parses the header of an encoded batch and checks its magic
// and stored length only; Decode and Verify check everything.
func DecodeHeader(buf []byte) (Header, error) {
	h, err := parseHeader(buf)
	if err == nil && int(h.StoredLen) != len(buf)-HeaderSize {
		return h, fmt.Errorf("decode header: body is %d bytes, header says %d: %w", len(buf)-HeaderSize, h.StoredLen, ErrCorrupt)
	}
	return h, err
}

// parseHeader parses the first HeaderSize bytes of buf and checks the magic.
func parseHeader(buf []byte) (Header, error) {
	if len(buf) < HeaderSize {
		return Header{}, fmt.Errorf("decode header: %d bytes: %w", len(buf), ErrCorrupt)
	}
	if string(buf[0:4]) != Magic {
		return Header{}, fmt.Errorf("decode header: bad magic %q: %w", buf[0:4], ErrCorrupt)
	}
	le := binary.LittleEndian
	h := Header{
		Version:   le.Uint16(buf[4:]),
		Flags:     le.Uint16(buf[6:]),
		Epoch:     le.Uint64(buf[8:]),
		Seq:       le.Uint64(buf[16:]),
		Created:   time.Unix(0, int64(le.Uint64(buf[24:]))),
		OpCount:   le.Uint32(buf[32:]),
		RawLen:    le.Uint32(buf[36:]),
		StoredLen: le.Uint32(buf[40:]),
		BodyCRC:   le.Uint32(buf[44:]),
		Prev:      le.Uint32(buf[48:]),
		Written:   le.Uint32(buf[52:]),
		Checksum:  le.Uint32(buf[56:]),
	}
	return h, nil
}

// checkHeader checks what DecodeHeader leaves out: the checksum first (the
// position and coverage of the checksum are the same in every format
// version), then version, flags, reserved bytes and limits.
func checkHeader(buf []byte, h *Header) error {
	if got := checksum(buf); got != h.Checksum {
		return fmt.Errorf("decode batch %d: checksum %08x, header says %08x: %w", h.Seq, got, h.Checksum, ErrCorrupt)
	}
	if h.Version != FormatVersion {
		return fmt.Errorf("decode batch %d: version %d (this build reads %d): %w", h.Seq, h.Version, FormatVersion, ErrVersion)
	}
	if h.Flags&^knownFlags != 0 {
		return fmt.Errorf("decode batch %d: unknown flags %#x: %w", h.Seq, h.Flags, ErrVersion)
	}
	if binary.LittleEndian.Uint32(buf[60:]) != 0 {
		return fmt.Errorf("decode batch %d: reserved header bytes are not zero: %w", h.Seq, ErrCorrupt)
	}
	if h.RawLen > MaxBodySize || h.OpCount > MaxOps {
		return fmt.Errorf("decode batch %d: %d bytes, %d ops: %w", h.Seq, h.RawLen, h.OpCount, ErrTooLarge)
	}
	return nil
}

// Verify checks an encoded batch's header and checksums without keeping
// the decoded ops.
func Verify(buf []byte) (Header, error) {
	h, _, err := decode(buf, false)
	return h, err
}

// Decode checks and decodes an encoded batch. A corrupt, truncated or
// unknown-version batch yields an error wrapping ErrCorrupt, ErrVersion or
// ErrTooLarge; nothing of it is returned. The batch shares no memory with
// buf, which callers reuse (segment reads, receive buffers).
func Decode(buf []byte) (*Batch, error) {
	h, ops, err := decode(buf, true)
	if err != nil {
		return nil, err
	}
	return batchOf(h, ops), nil
}

func batchOf(h Header, ops []Op) *Batch {
	return &Batch{Epoch: h.Epoch, Seq: h.Seq, Created: h.Created, Prev: h.Prev, Written: uint64(h.Written), More: h.More(), Ops: ops}
}

func decode(buf []byte, wantOps bool) (Header, []Op, error) {
	h, err := DecodeHeader(buf)
	if err != nil {
		return h, nil, err
	}
	if err := checkHeader(buf, &h); err != nil {
		return h, nil, err
	}
	body := buf[HeaderSize:]
	if h.Flags&FlagZstd != 0 {
		var scratch *[]byte
		if !wantOps {
			// Nothing of the body is kept: decompress into a pooled buffer.
			scratch = getRaw(int(h.RawLen))
			defer putRaw(scratch)
		}
		body, err = decompress(body, int(h.RawLen), scratch)
		if err != nil {
			return h, nil, fmt.Errorf("decode batch %d: %w", h.Seq, err)
		}
	} else if wantOps {
		// The ops' data and names point into the body: a raw one is
		// copied out of buf, as decompressing does for a compressed one.
		body = bytes.Clone(body)
	}
	if len(body) != int(h.RawLen) {
		return h, nil, fmt.Errorf("decode batch %d: body is %d bytes, header says %d: %w", h.Seq, len(body), h.RawLen, ErrCorrupt)
	}
	if crc32.Checksum(body, castagnoli) != h.BodyCRC {
		return h, nil, fmt.Errorf("decode batch %d: body checksum mismatch: %w", h.Seq, ErrCorrupt)
	}
	ops, err := parseBody(body, int(h.OpCount), wantOps)
	if err != nil {
		return h, nil, fmt.Errorf("decode batch %d: %w", h.Seq, err)
	}
	return h, ops, nil
}
