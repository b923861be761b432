package journal

import (
	"fmt"
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

// BenchmarkDecode checks and decodes what BenchmarkEncode seals, as a
// backup does for every batch it receives (Verify) and applies (Decode).
func BenchmarkDecode(b *testing.B) {
	for _, size := range []struct {
		name  string
		pages int
	}{{"4KiB", 1}, {"800KiB", 200}} {
		r := rand.NewChaCha8([32]byte{1})
		var ops []Op
		for i := 0; i < size.pages; i++ {
			p := make([]byte, 4096)
			r.Read(p[:2048])
			ops = append(ops, Op{Kind: KindWrite, Fid: 7, Path: "db/wal", Offset: uint64(i) * 4096, Data: p})
		}
		enc, _, err := Encode(&Batch{Epoch: 1, Seq: 1, Created: time.Unix(1, 0), Ops: ops})
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range []struct {
			name string
			fn   func([]byte) error
		}{
			{"Verify", func(e []byte) error { _, err := Verify(e); return err }},
			{"Decode", func(e []byte) error { _, err := Decode(e); return err }},
		} {
			b.Run(size.name+"/"+f.name, func(b *testing.B) {
				b.SetBytes(int64(size.pages * 4096))
				b.ReportAllocs()
				for b.Loop() {
					if err := f.fn(enc); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkEncodeCommit seals the batch of one database commit, as a
// barrier under --fsync replicated or the proxy seals it: a redo-log
// append of log-like text and its mtime. Below MinCompress it is stored
// raw.
func BenchmarkEncodeCommit(b *testing.B) {
	for _, size := range []int{512, 2048, 8192} {
		line := []byte("INSERT INTO wp_posts (post_content) VALUES ('revision 42 of a post') /* trx 1234 */\n")
		data := make([]byte, 0, size)
		for len(data) < size {
			data = append(data, line...)
		}
		batch := &Batch{Epoch: 1, Seq: 1, Created: time.Unix(1, 0), Ops: []Op{
			{Kind: KindWrite, Fid: 7, Path: "mysql/ib_logfile0", Offset: 1 << 20, Data: data[:size]},
			{Kind: KindUtimens, Fid: 7, Path: "mysql/ib_logfile0", Atime: OmitTime, Mtime: 1},
		}}
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Encode(batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
