package health

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Gauges a Collector reports, one Source call per scrape.
var (
	buildInfo = prometheus.NewDesc("pbfs_build_info", "Always 1: the pbfs version and the Go version it was built with.",
		[]string{"version", "go_version"}, nil)
	roleDesc = prometheus.NewDesc("pbfs_role", "1 for the role this process serves now (primary, backup or none), 0 for the others.",
		[]string{"role"}, nil)
	readyDesc = prometheus.NewDesc("pbfs_ready", "1 while the process serves its role (what /readyz answers 200 to), else 0.",
		nil, nil)
	epochDesc = prometheus.NewDesc("pbfs_journal_epoch", "The term (epoch) the journal is at.",
		nil, nil)
	lastSeqDesc = prometheus.NewDesc("pbfs_journal_last_seq", "The newest batch in the journal (on a backup: durable).",
		nil, nil)
	appliedDesc = prometheus.NewDesc("pbfs_backup_apply_lag_batches", "Batches a backup holds durably but has not applied to its copy yet.",
		nil, nil)
	lagDesc = prometheus.NewDesc("pbfs_replicate_backup_lag_batches", "Batches of the primary's journal a backup does not hold yet.",
		[]string{"backup"}, nil)
)

// collector turns a Source into gauges.
type collector struct {
	src     Source
	version string
}

// Collectors are what every pbfs process with an admin port reports
// besides its own metrics: the gauges above from src, and Go's runtime
// (go_*) and the process's (process_*) collectors.
func Collectors(src Source, version string) []prometheus.Collector {
	return []prometheus.Collector{
		&collector{src: src, version: version},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{buildInfo, roleDesc, readyDesc, epochDesc, lastSeqDesc, appliedDesc, lagDesc} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	r := c.src()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(buildInfo, 1, c.version, runtime.Version())
	for _, role := range []string{RolePrimary, RoleBackup, RoleNone} {
		gauge(roleDesc, b2f(r.Role == role), role)
	}
	gauge(readyDesc, b2f(r.Ready))
	if r.Role == RoleNone {
		return
	}
	gauge(epochDesc, float64(r.Epoch))
	gauge(lastSeqDesc, float64(r.LastSeq))
	switch r.Role {
	case RoleBackup:
		gauge(appliedDesc, float64(r.LastSeq-min(r.AppliedSeq, r.LastSeq)))
	case RolePrimary:
		for addr, lag := range r.Lag {
			gauge(lagDesc, float64(lag), addr)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
