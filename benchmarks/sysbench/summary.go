package main

import (
	"slices"
	"strings"

	report_ "github.com/pbfs/pbfs/benchmarks/internal/report"
)

// summarize writes each workload's scenarios to summary.json as
// "sysbench-<workload>" (tps; latency percentiles from sysbench's
// histogram). Failed runs are left out.
func (rep *report) summarize(dir string) error {
	byWorkload := map[string]*report_.Workload{}
	for _, r := range rep.rows {
		if r.failed != "" {
			continue
		}
		wl := byWorkload[r.workload]
		if wl == nil {
			wl = &report_.Workload{Benchmark: "sysbench", Unit: "transactions", Updated: rep.end.UTC(), Scenarios: map[string]*report_.Scenario{}}
			byWorkload[r.workload] = wl
		}
		wl.Scenarios[r.scenario] = &report_.Scenario{Throughput: r.r.tps, P50Ms: r.r.p50, P95Ms: r.r.p95, P99Ms: r.r.p99,
			Errors: int64(r.r.errPerSec * rep.b.cfg.duration.Seconds())}
	}
	for name, wl := range byWorkload {
		if err := report_.Merge(dir, "sysbench-"+name, wl); err != nil {
			return err
		}
	}
	return nil
}

// charts draws, per workload, p50 and p99 latency against tps, one line
// per scenario (its open-loop runs and its closed-loop peak).
func (rep *report) charts(dir, stem string) (string, error) {
	var out strings.Builder
	var workloads []string
	for _, r := range rep.rows {
		if len(r.r.curve) > 0 && !slices.Contains(workloads, r.workload) {
			workloads = append(workloads, r.workload)
		}
	}
	for _, w := range workloads {
		md, err := report_.LatencyCharts(dir, stem+"-"+w, "sysbench "+w, "transactions/s", func(q float64) []report_.Series {
			var series []report_.Series
			for _, r := range rep.rows {
				if r.workload != w || r.failed != "" {
					continue
				}
				s := report_.Series{Name: r.scenario}
				for _, pt := range r.r.curve {
					if !pt.overloaded {
						s.Points = append(s.Points, report_.Point{X: pt.tps, Y: map[float64]float64{0.5: pt.p50, 0.99: pt.p99}[q]})
					}
				}
				s.Points = append(s.Points, report_.Point{X: r.r.tps, Y: map[float64]float64{0.5: r.r.p50, 0.99: r.r.p99}[q]})
				series = append(series, s)
			}
			return series
		})
		if err != nil {
			return "", err
		}
		out.WriteString(strings.Replace(md, "## Charts", "## Charts: "+w, 1))
	}
	return out.String(), nil
}
