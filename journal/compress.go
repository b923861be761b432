package journal

import (
	"fmt"

	"github.com/klauspost/compress/zstd"
)

// One encoder and one decoder serve every goroutine: EncodeAll and
// DecodeAll are safe for concurrent use.
var (
	zenc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(2))
	zdec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxMemory(MaxBodySize))
)

func compress(dst, raw []byte) []byte { return zenc.EncodeAll(raw, dst) }

func decompress(stored []byte, rawLen int) ([]byte, error) {
	out, err := zdec.DecodeAll(stored, make([]byte, 0, rawLen))
	if err != nil {
		return nil, fmt.Errorf("zstd: %v: %w", err, ErrCorrupt)
	}
	return out, nil
}
