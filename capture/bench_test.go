package capture

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkWrite measures capture's cost on the write path, in process
// (no FUSE): each iteration is what the pattern writes per operation, the
// batch is sealed and released every 200 iterations as the committer
// does, and "off" is the same FS passing through. The difference between
// the two is what capture adds to every WRITE request.
func BenchmarkWrite(b *testing.B) {
	patterns := []struct {
		name string
		step func(f *FS, h *Handle, i int)
	}{
		// SQLite WAL commit: a 24-byte frame header, then the 4 KiB page.
		{"wal", func(f *FS, h *Handle, i int) {
			off := 32 + int64(i%4000)*4120
			f.Write(h, off, walHeader, nil)
			f.Write(h, off+24, page, nil)
		}},
		// fio randwrite: 4 KiB at a random aligned offset of 64 MiB.
		{"random4k", func(f *FS, h *Handle, i int) {
			f.Write(h, int64(rand.IntN(16384))*4096, page, nil)
		}},
		// Sequential 128 KiB writes (the largest request FUSE sends).
		{"seq128k", func(f *FS, h *Handle, i int) {
			f.Write(h, int64(i%512)*(128<<10), big, nil)
		}},
	}
	for _, p := range patterns {
		for _, capture := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/capture=%v", p.name, capture), func(b *testing.B) {
				f, h := benchFS(b, capture)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					p.step(f, h, i)
					if i%200 == 199 {
						s := f.Seal()
						s.Release()
					}
				}
			})
		}
	}
}

var (
	walHeader = make([]byte, 24)
	page      = make([]byte, 4096)
	big       = make([]byte, 128<<10)
)

func benchFS(b *testing.B, capture bool) (*FS, *Handle) {
	fd, err := unix.Open(b.TempDir(), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	f, err := New(fd, Options{Capture: capture, MaxBatchBytes: 64 << 20, Metrics: NewMetrics(nil)})
	if err != nil {
		b.Fatal(err)
	}
	_, h, _, err := f.Create(f.Root(), "data", unix.O_RDWR, 0o644, Caller{}, false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		f.Release(h)
		f.Close()
	})
	return f, h
}
