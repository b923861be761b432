package journal

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkEncode seals a batch the size the committer seals every 50 ms
// under SQLite's commit loop: 200 pages of 4 KiB of half-compressible data.
func BenchmarkEncode(b *testing.B) {
	r := rand.NewChaCha8([32]byte{1})
	var ops []Op
	for i := 0; i < 200; i++ {
		p := make([]byte, 4096)
		r.Read(p[:2048])
		ops = append(ops, Op{Kind: KindWrite, Fid: 7, Path: "db/wal", Offset: uint64(i) * 4096, Data: p})
	}
	batch := &Batch{Epoch: 1, Seq: 1, Created: time.Unix(1, 0), Ops: ops}
	b.SetBytes(int64(batch.DataBytes()))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, _, err := Encode(batch); err != nil {
			b.Fatal(err)
		}
	}
}
