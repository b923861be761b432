package capture

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// diffGap is the longest unchanged run that write diffing does not split
// a recorded run at: shorter gaps cost less as bytes than as another op.
const diffGap = 32

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 128<<10); return &b }}

func putBuf(b []byte) {
	b = b[:0]
	bufPool.Put(&b)
}

// oldBytes reads the bytes a write of n bytes at off will replace. A short
// result means the write extends the file past its end.
func (f *FS) oldBytes(fd int, off int64, n int) []byte {
	bp := bufPool.Get().(*[]byte)
	b := *bp
	if cap(b) < n {
		b = make([]byte, n)
	}
	b = b[:n]
	k, err := unix.Pread(fd, b, off)
	if err != nil || k < 0 {
		k = 0
	}
	return b[:k]
}

// maxDiffRuns bounds the runs one write records: past it, the write is
// recorded as one span from its first to its last changed byte (scattered
// single-byte changes would otherwise cost an extent each).
const maxDiffRuns = 16

// recordDiff records the runs of data that differ from old (and all of
// data past len(old)).
func recordDiff(log *journal.DataLog, off uint64, data, old []byte) {
	var runs [maxDiffRuns][2]int
	n, start, gap := 0, -1, 0
	over := false
	add := func(a, b int) {
		if n == maxDiffRuns {
			over = true
			runs[n-1][1] = b
			return
		}
		runs[n] = [2]int{a, b}
		n++
	}
	for i := 0; i < len(old) && i < len(data); i++ {
		if data[i] != old[i] {
			if start < 0 {
				start = i
			}
			gap = 0
			continue
		}
		if start >= 0 {
			if gap++; gap > diffGap {
				add(start, i-gap+1)
				start, gap = -1, 0
			}
		}
	}
	switch {
	case len(data) > len(old):
		if start < 0 {
			start = len(old)
		}
		add(start, len(data))
	case start >= 0:
		add(start, len(data)-gap)
	}
	if over {
		runs[0][1], n = runs[n-1][1], 1
	}
	for _, r := range runs[:n] {
		log.Write(off+uint64(r[0]), data[r[0]:r[1]])
	}
}
