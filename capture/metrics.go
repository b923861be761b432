package capture

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pbfs/pbfs/journal"
)

// Metrics are the capture layer's Prometheus collectors.
type Metrics struct {
	Ops           *prometheus.CounterVec
	WriteBytes    prometheus.Counter
	BackingErrors *prometheus.CounterVec
	Throttled     prometheus.Counter
	Refused       prometheus.Counter
	LostNames     prometheus.Counter
	Seals         *prometheus.CounterVec
	LocalOps      prometheus.Counter
	CrossRefused  prometheus.Counter

	byKind map[journal.Kind]prometheus.Counter // Ops children, resolved once
}

// op counts one captured op of kind k.
func (m *Metrics) op(k journal.Kind) { m.byKind[k].Inc() }

// NewMetrics creates the collectors and registers them with reg (if set).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pbfs_capture_ops_total", Help: "Mutations captured, by op kind.",
		}, []string{"kind"}),
		WriteBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pbfs_capture_write_bytes_total", Help: "Bytes written through the mount.",
		}),
		BackingErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pbfs_fs_backing_errors_total", Help: "Exhausted-resource and I/O errors from the backing filesystem, by op and errno.",
		}, []string{"op", "errno"}),
		Throttled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pbfs_capture_throttled_total", Help: "Times a writer waited because too much was pending.",
		}),
		Refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pbfs_capture_writes_refused_total", Help: "Writes and fallocates refused with ENOSPC because the journal's file system is down to its reserve.",
		}),
		LostNames: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pbfs_capture_lost_names_total", Help: "Hard-linked files whose surviving name could not be found.",
		}),
		Seals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pbfs_capture_seals_total", Help: "Batches sealed, by trigger.",
		}, []string{"trigger"}),
	}
	m.LocalOps = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pbfs_capture_local_ops_total", Help: "Namespace ops on local-only paths, kept on the primary's disk and not journaled.",
	})
	m.CrossRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pbfs_capture_cross_class_refused_total", Help: "Renames and links refused with EXDEV because they would move a file between a local-only and a replicated path.",
	})
	m.byKind = map[journal.Kind]prometheus.Counter{}
	for _, k := range journal.Kinds() {
		m.byKind[k] = m.Ops.WithLabelValues(k.String())
	}
	if reg != nil {
		reg.MustRegister(m.Ops, m.WriteBytes, m.BackingErrors, m.Throttled, m.Refused, m.LostNames, m.Seals, m.LocalOps, m.CrossRefused)
	}
	return m
}
