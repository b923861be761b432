package sparse

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// A file cut while its extents are listed is listed as far as it was
// found, never an error: verify digests files the service is writing, and
// a SEEK_HOLE from an offset the cut left beyond the end answers ENXIO.
func TestDataExtentsOfAFileBeingCut(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 1 << 20
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			f.Truncate(0)
			f.WriteAt([]byte("x"), size/2)
			f.WriteAt([]byte("y"), size-1)
		}
	}()
	defer func() { stop.Store(true); <-done }()
	for i := 0; i < 20000; i++ {
		exts, err := DataExtents(int(f.Fd()), size)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		for _, e := range exts {
			if e.Off >= e.End || e.End > size {
				t.Fatalf("round %d: extent %+v of a %d-byte file", i, e, size)
			}
		}
	}
}
