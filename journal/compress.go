package journal

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// One encoder and one decoder serve every goroutine: EncodeAll and
// DecodeAll are safe for concurrent use. Frames carry no content checksum:
// BodyCRC covers the uncompressed body already, and zstd's xxhash over it
// made compression a quarter slower (625 -> 826 MB/s on batches of fio's
// random writes, docs/PERFORMANCE.md).
var (
	zenc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(2), zstd.WithEncoderCRC(false))
	zdec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxMemory(MaxBodySize))
)

// MinCompress is the smallest body Encode compresses. Below it zstd costs
// more than it saves: on the 2-vCPU machine of docs/PERFORMANCE.md
// SpeedFastest takes 6 µs for 512 bytes, 12 µs for 2 KiB and 42 µs for
// 16 KiB, paid on the primary's commit path for every barrier, while the
// bytes it saves cost a fraction of that to send and store. Barriers of
// a database's commits (a redo-log write, a page or two) fall below it
// and are stored and shipped raw, which the format allows (FlagZstd
// clear); bulk writes, which fill batches of many pages, are compressed.
const MinCompress = 16 << 10

// storeBody returns a batch buffer with room for the header followed by
// the body as stored, and the flags that say how: zstd-compressed, or
// raw where the body is below MinCompress or compression would not make
// it smaller.
func storeBody(raw []byte) ([]byte, uint16) {
	if len(raw) < MinCompress {
		out := make([]byte, HeaderSize, HeaderSize+len(raw))
		return append(out, raw...), 0
	}
	out := zenc.EncodeAll(raw, make([]byte, HeaderSize, HeaderSize+len(raw)/2+64))
	if len(out)-HeaderSize >= len(raw) {
		return append(out[:HeaderSize], raw...), 0
	}
	if cap(out) > 2*len(out)+4096 {
		// Compressed far below the guess: the batch is kept a while
		// (the journal's newest are served from memory), so not in a
		// buffer many times its size.
		out = append([]byte(nil), out...)
	}
	return out, FlagZstd
}

// decompress decompresses stored, of rawLen bytes uncompressed, into a new
// buffer, or into *scratch (which it updates) if scratch is not nil.
func decompress(stored []byte, rawLen int, scratch *[]byte) ([]byte, error) {
	var dst []byte
	if scratch != nil {
		dst = (*scratch)[:0]
	} else {
		dst = make([]byte, 0, rawLen)
	}
	out, err := zdec.DecodeAll(stored, dst)
	if scratch != nil {
		*scratch = out[:0]
	}
	if err != nil {
		return nil, fmt.Errorf("zstd: %v: %w", err, ErrCorrupt)
	}
	return out, nil
}

// rawPool keeps Encode's uncompressed body buffers, which die as soon as
// the body is compressed; the committer encodes a batch every seal.
var rawPool sync.Pool

// maxPooledRaw bounds the buffers kept: a rare huge batch is left to the
// garbage collector rather than pinned.
const maxPooledRaw = 8 << 20

func getRaw(size int) *[]byte {
	if p, ok := rawPool.Get().(*[]byte); ok && cap(*p) >= size {
		return p
	}
	b := make([]byte, 0, size)
	return &b
}

func putRaw(p *[]byte) {
	if cap(*p) <= maxPooledRaw {
		rawPool.Put(p)
	}
}
