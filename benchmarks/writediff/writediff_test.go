// Package writediff measures whether write diffing pays: the same page
// rewrites on a mount with --write-diff and without, reporting throughput
// and how many journal bytes each written byte costs. Run with
// `go test -bench . ./benchmarks/writediff` (make bench does).
package writediff

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/mount"
)

const (
	fileSize = 16 << 20
	pageSize = 16 << 10 // an InnoDB page
)

// BenchmarkPageRewrite rewrites random 16 KiB pages of a 16 MiB file, as a
// database does, changing a given share of each page's bytes: clustered in
// four contiguous runs (a page header, a row or two, a checksum trailer),
// or scattered one byte at a time (the worst case for diffing).
func BenchmarkPageRewrite(b *testing.B) {
	for _, scatter := range []bool{false, true} {
		for _, changed := range []float64{0.01, 0.10, 1.0} {
			for _, diff := range []bool{false, true} {
				name := fmt.Sprintf("clustered/changed=%g/diff=%v", changed, diff)
				if scatter {
					name = "scattered" + name[len("clustered"):]
				}
				b.Run(name, func(b *testing.B) { rewrite(b, changed, diff, scatter) })
			}
		}
	}
}

func rewrite(b *testing.B, changed float64, diff, scatter bool) {
	e := fstest.Setup(b, mount.Config{WriteDiff: diff, SealInterval: 1 << 40}, nil)
	p := filepath.Join(e.Vol, "db")
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, fileSize)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		b.Fatal(err)
	}
	before := e.Barrier()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, pageSize)
	b.SetBytes(pageSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := int64(r.IntN(fileSize/pageSize)) * pageSize
		copy(page, data[off:off+pageSize])
		if scatter {
			for k := 0; k < int(changed*pageSize); k++ {
				page[r.IntN(pageSize)]++
			}
		} else {
			run := int(changed * pageSize / 4)
			for k := 0; k < 4; k++ {
				j := r.IntN(pageSize - run + 1)
				for x := j; x < j+run; x++ {
					page[x]++
				}
			}
		}
		copy(data[off:], page)
		if _, err := f.WriteAt(page, off); err != nil {
			b.Fatal(err)
		}
		if i%64 == 63 {
			e.Barrier()
		}
	}
	e.Barrier()
	b.StopTimer()
	var stored, payload int64
	journal.Walk(e.Client, before+1, 0, true, func(c journal.Checked) error {
		if c.Err != nil {
			b.Fatal(c.Err)
		}
		stored += int64(c.Size)
		payload += int64(c.Batch.DataBytes())
		return nil
	})
	written := float64(b.N) * pageSize
	b.ReportMetric(float64(payload)/written, "payload/written")
	b.ReportMetric(float64(stored)/written, "stored/written")
}
