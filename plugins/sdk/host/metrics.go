package host

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	up             *prometheus.GaugeVec
	restarts       *prometheus.CounterVec
	unresponsive   *prometheus.CounterVec
	barriers       *prometheus.CounterVec
	barrierSeconds *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pbfs_plugin_up",
			Help: "1 while the plugin runs."}, []string{"plugin"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pbfs_plugin_restarts_total",
			Help: "Times a plugin crashed or failed to start and was started again."}, []string{"plugin"}),
		unresponsive: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pbfs_plugin_unresponsive_total",
			Help: "Times a running plugin stopped answering health checks and was restarted."}, []string{"plugin"}),
		barriers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pbfs_plugin_barriers_total",
			Help: "Barriers plugins asked for, by result."}, []string{"plugin", "result"}),
		barrierSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pbfs_plugin_barrier_seconds",
			Help: "How long plugins' barriers took.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}, []string{"plugin"}),
	}
	if reg != nil {
		reg.MustRegister(m.up, m.restarts, m.unresponsive, m.barriers, m.barrierSeconds)
	}
	return m
}
