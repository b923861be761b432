package primary

import "github.com/prometheus/client_golang/prometheus"

type shipMetrics struct {
	acked    *prometheus.GaugeVec
	sent     *prometheus.CounterVec
	sentB    *prometheus.CounterVec
	state    *prometheus.GaugeVec
	raw      *prometheus.GaugeVec
	degraded *prometheus.CounterVec
	// applyBlocked: 1 while a backup reports a batch it cannot apply.
	applyBlocked *prometheus.GaugeVec
	barriers     prometheus.Histogram
	// resyncs, and the entries and blocks they sent, by kind (full,
	// targeted: resync_scope.go).
	resyncs       *prometheus.CounterVec
	resyncEntries *prometheus.CounterVec
	resyncBlocks  *prometheus.CounterVec
	// resyncPause is how long mutations waited while a resync listed the tree.
	resyncPause prometheus.Histogram
}

func newShipMetrics(reg prometheus.Registerer) *shipMetrics {
	m := &shipMetrics{
		acked: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pbfs_replicate_acked_seq", Help: "Newest batch a backup acked as durable."}, []string{"backup"}),
		sent:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pbfs_replicate_batches_sent_total", Help: "Batches sent, by backup."}, []string{"backup"}),
		sentB: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pbfs_replicate_bytes_sent_total", Help: "Encoded batch bytes sent, by backup."}, []string{"backup"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pbfs_replicate_backup_up", Help: "1 while a backup's stream is up."}, []string{"backup"}),
		raw: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pbfs_replicate_stream_raw", Help: "1 while a backup's stream is up as a raw stream, 0 while it is up over gRPC (a backup from before raw streams) or down.",
		}, []string{"backup"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pbfs_replicate_degraded_seconds_total", Help: "Seconds a backup spent dropped from the ack set.",
		}, []string{"backup"}),
		applyBlocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pbfs_replicate_backup_apply_blocked", Help: "1 while a backup reports a batch it cannot apply to its volume (pbfs status says why).",
		}, []string{"backup"}),
		barriers: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pbfs_replicate_barrier_seconds", Help: "Time for a barrier to be durable on the ack set.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pbfs_replicate_resyncs_total", Help: "Resyncs completed, by kind: full (the whole volume) or targeted (the paths the histories touched since they parted).",
		}, []string{"kind"}),
		resyncEntries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pbfs_replicate_resync_entries_total", Help: "Entries (paths) resyncs listed to backups, by kind.",
		}, []string{"kind"}),
		resyncBlocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pbfs_replicate_resync_blocks_total", Help: "64 KiB blocks resyncs sent to backups, by kind.",
		}, []string{"kind"}),
		resyncPause: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pbfs_replicate_resync_pause_seconds", Help: "How long mutations waited while a resync took its snapshot.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.acked, m.sent, m.sentB, m.state, m.raw, m.degraded, m.applyBlocked, m.barriers, m.resyncs, m.resyncEntries, m.resyncBlocks, m.resyncPause)
	}
	return m
}
