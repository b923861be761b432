package replicate

import "github.com/prometheus/client_golang/prometheus"

type backupMetrics struct {
	durable       prometheus.Gauge
	applied       prometheus.Gauge
	fenced        prometheus.Gauge
	rejected      *prometheus.CounterVec
	authFailures  prometheus.Counter
	applyFailures prometheus.Counter
	resyncFails   prometheus.Counter
	applyRetries  prometheus.Counter
	applyBlocked  prometheus.Gauge
	accepts       prometheus.Counter
	conns         *prometheus.GaugeVec
	connsClosed   *prometheus.CounterVec
	busy          *prometheus.CounterVec
	store         prometheus.Histogram
}

func newBackupMetrics(reg prometheus.Registerer) *backupMetrics {
	m := &backupMetrics{
		durable: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pbfs_backup_durable_seq", Help: "Newest batch durable in the backup's journal."}),
		applied: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pbfs_backup_applied_seq", Help: "Newest batch applied to the backup's volume."}),
		fenced:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "pbfs_backup_fenced_epoch", Help: "The epoch this backup was fenced at: primaries of it or below are refused (0: none)."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pbfs_backup_rejected_total", Help: "Primaries or batches refused, by reason.",
		}, []string{"reason"}),
		authFailures:  prometheus.NewCounter(prometheus.CounterOpts{Name: "pbfs_backup_auth_failures_total", Help: "Connections refused for a wrong or missing token."}),
		applyFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "pbfs_backup_apply_failures_total", Help: "Batches that failed to apply."}),
		resyncFails:   prometheus.NewCounter(prometheus.CounterOpts{Name: "pbfs_backup_resync_failures_total", Help: "Resyncs of this backup's volume that failed (it stays stalled until the next)."}),
		applyRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pbfs_backup_apply_retries_total", Help: "Times a batch that failed for want of a resource (ENOSPC, EDQUOT, EMFILE, ENFILE, ENOMEM) was retried.",
		}),
		applyBlocked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pbfs_backup_apply_blocked", Help: "1 while a batch cannot be applied to the volume and is retried (pbfs status --journal says why).",
		}),
		accepts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pbfs_backup_accept_failures_total", Help: "Connections the backup's port could not accept (EMFILE, ENFILE: out of descriptors), retried after a pause.",
		}),
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pbfs_backup_connections", Help: "Connections the backup's port holds, by whether they showed the token.",
		}, []string{"state"}),
		connsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pbfs_backup_connections_closed_total",
			Help: "Connections the backup closed before they showed the token, or turned away, by reason: auth_timeout, unauthenticated_limit, descriptor_limit, connection_limit.",
		}, []string{"reason"}),
		busy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pbfs_backup_calls_busy_total", Help: "Calls refused because as many of their kind were already being served, by method.",
		}, []string{"method"}),
		store: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pbfs_backup_store_seconds",
			Help:    "Time to check and durably append a group of batches that arrived together, before the ack.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.durable, m.applied, m.fenced, m.rejected, m.authFailures, m.applyFailures, m.resyncFails, m.applyRetries, m.applyBlocked, m.accepts, m.conns, m.connsClosed, m.busy, m.store)
	}
	return m
}

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
