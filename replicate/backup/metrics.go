package backup

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
