package mount

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// timings are the barrier histograms the mount keeps itself. The other
// parts of a barrier are timed where they happen: the flush round
// (pbfs_fs_flush_seconds), the seal and append
// (pbfs_journal_commit_seconds), the ack wait
// (pbfs_replicate_barrier_seconds) and, on a backup, the synced append
// (pbfs_backup_store_seconds). docs/PERFORMANCE.md lists them together.
type timings struct {
	barrier prometheus.Histogram // a whole barrier, as its caller waits for it
	sync    prometheus.Histogram // the journal's local sync when no backup holds the batch
}

func newTimings(reg prometheus.Registerer) timings {
	buckets := prometheus.ExponentialBuckets(50e-6, 2, 16)
	t := timings{
		barrier: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pbfs_barrier_seconds", Buckets: buckets,
			Help: "Time from a barrier's call to its answer inside the mount: flush round, seal and append, ack wait, local sync.",
		}),
		sync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pbfs_journal_sync_seconds", Buckets: buckets,
			Help: "Time barriers that no backup held spent syncing the primary's journal.",
		}),
	}
	reg.MustRegister(t.barrier, t.sync)
	return t
}

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
