package mount

import (
	"slices"
	"sync"
	"time"
)

// latencies keeps the durations of the last barriers, for the status's
// percentiles (a Prometheus histogram, pbfs_replicate_barrier_seconds,
// has them too, in buckets).
type latencies struct {
	mu   sync.Mutex
	ring [1024]time.Duration
	n    int // barriers recorded, all told
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.ring[l.n%len(l.ring)] = d
	l.n++
	l.mu.Unlock()
}

// percentiles returns the p50, p95 and p99 of the recorded window (zeros
// before the first barrier).
func (l *latencies) percentiles() (p50, p95, p99 time.Duration) {
	l.mu.Lock()
	w := append([]time.Duration(nil), l.ring[:min(l.n, len(l.ring))]...)
	l.mu.Unlock()
	if len(w) == 0 {
		return 0, 0, 0
	}
	slices.Sort(w)
	at := func(q float64) time.Duration { return w[min(len(w)-1, int(q*float64(len(w))))] }
	return at(0.50), at(0.95), at(0.99)
}
