package main

import (
	"context"
	"fmt"

	benchreport "github.com/pbfs/pbfs/benchmarks/internal/report"
)

// metrics maps a Prometheus series (name{labels}) to its value.
type metrics map[string]float64

// scrape reads the primary's metrics and every backup's, summed by series
// (a backup's series are named pbfs_backup_*, apart from the primary's).
func scrape(ctx context.Context, c *pcluster) (metrics, error) {
	m := metrics{}
	for _, cl := range c.clients() {
		text, err := cl.Metrics(ctx)
		if err != nil {
			return nil, err
		}
		m = m.plus(parseMetrics(text))
	}
	return m, nil
}

func parseMetrics(text string) metrics { return benchreport.ParseMetrics(text) }

func (m metrics) plus(o metrics) metrics {
	d := metrics{}
	for k, v := range m {
		d[k] = v
	}
	for k, v := range o {
		d[k] += v
	}
	return d
}

func (m metrics) minus(o metrics) metrics {
	d := metrics{}
	for k, v := range m {
		d[k] = v - o[k]
	}
	return d
}

// mean is a histogram's mean over the point, in ms, or "–".
func (m metrics) mean(name string) string {
	n := m.sum(name+"_count", "")
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f", m.sum(name+"_sum", "")/n*1e3)
}

// sum adds the series of metric name whose labels contain label.
func (m metrics) sum(name, label string) float64 { return benchreport.SumSeries(m, name, label) }
