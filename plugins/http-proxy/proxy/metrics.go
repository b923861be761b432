package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

type metrics struct {
	reg             *prometheus.Registry
	requests        *prometheus.CounterVec
	shed            *prometheus.CounterVec
	inflight        prometheus.Gauge
	holdSeconds     prometheus.Histogram
	barrierSeconds  prometheus.Histogram
	barrierFailures prometheus.Counter
	groupSize       prometheus.Histogram
	upstreamConns   prometheus.Gauge
	dials           prometheus.Counter
	dialErrors      *prometheus.CounterVec
	acceptErrors    *prometheus.CounterVec
	clientConns     prometheus.Gauge
	parked          prometheus.Gauge
	spoolBytes      prometheus.Gauge
	bodyErrors      *prometheus.CounterVec
	evictions       *prometheus.CounterVec
	upstreamDown    prometheus.Gauge
	upstreamWaiting prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pbfs_proxy_requests_total",
			Help: "Requests answered, by status code class (2xx, 4xx, ...)."}, []string{"code"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pbfs_proxy_shed_total",
			Help: "Requests turned away with 503, by reason (overloaded, too-many-connections, queue-timeout, no-fds, upstream-exhausted, upstream-down, spool, spool-full)."}, []string{"reason"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pbfs_proxy_inflight_requests",
			Help: "Requests admitted and not yet answered."}),
		holdSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pbfs_proxy_hold_seconds",
			Help: "How long responses were held for their barrier.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}),
		barrierSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pbfs_proxy_barrier_seconds",
			Help: "Barrier round trips through the host.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}),
		barrierFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "pbfs_proxy_barrier_failures_total",
			Help: "Barriers that failed or timed out; their responses became 503s."}),
		groupSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pbfs_proxy_barrier_group_size",
			Help: "Responses released by one barrier.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		upstreamConns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pbfs_proxy_upstream_connections",
			Help: "Open connections to the upstream service."}),
		dials: prometheus.NewCounter(prometheus.CounterOpts{Name: "pbfs_proxy_upstream_dials_total",
			Help: "Connections opened to the upstream service."}),
		dialErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pbfs_proxy_upstream_dial_errors_total",
			Help: "Failed upstream dials, by reason (emfile, enfile, no-ports, refused, timeout, ...)."}, []string{"reason"}),
		acceptErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pbfs_proxy_accept_errors_total",
			Help: "Failed accepts, by reason."}, []string{"reason"}),
		clientConns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pbfs_proxy_client_connections",
			Help: "Open client connections."}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pbfs_proxy_upstream_slots_parked",
			Help: "Upstream pool slots out of use for a while because a dial found no fds or ports."}),
		spoolBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pbfs_proxy_spool_bytes",
			Help: "Bytes of request and response bodies spooled to disk now (spool-disk bounds them)."}),
		bodyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pbfs_proxy_request_body_errors_total",
			Help: "Request bodies refused, by reason (too-large: 413, timeout: 408, unreadable: 400)."}, []string{"reason"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pbfs_proxy_client_evictions_total",
			Help: "Client connections cut off to admit another while every connection was taken, by reason (waiting, slow-body)."}, []string{"reason"}),
		upstreamDown: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pbfs_proxy_upstream_down",
			Help: "1 while the service refuses connections and requests wait for it (upstream-wait)."}),
		upstreamWaiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pbfs_proxy_upstream_waiting_requests",
			Help: "Requests waiting for the service to accept connections."}),
	}
	m.reg.MustRegister(m.requests, m.shed, m.inflight, m.holdSeconds, m.barrierSeconds, m.barrierFailures,
		m.groupSize, m.upstreamConns, m.dials, m.dialErrors, m.acceptErrors, m.clientConns, m.parked,
		m.spoolBytes, m.bodyErrors, m.evictions, m.upstreamDown, m.upstreamWaiting,
		// The proxy's own CPU and memory (process_cpu_seconds_total: when
		// it nears one core, raise procs) and its Go runtime's.
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return m
}
