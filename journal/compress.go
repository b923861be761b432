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

func compress(dst, raw []byte) []byte { return zenc.EncodeAll(raw, dst) }

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
