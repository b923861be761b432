package main

import (
	"fmt"
	"time"

	benchreport "github.com/pbfs/pbfs/benchmarks/internal/report"
)

// summarize merges the pooled points into dir's summary.json: one
// workload per write size ("barrier-4k"; "fsync-4k" with -via fsync), one
// scenario per backup count and delay, as the storage benchmarks name
// them. Barriers have no plain scenario, so their ratios are 0.
func (rep *report) summarize(dir string) error {
	workloads := map[string]*benchreport.Workload{}
	var names []string
	kind := "barrier-"
	if rep.cfg.viaFsync {
		kind = "fsync-"
	}
	for _, p := range rep.points() {
		name := kind + sizeKey(p.size)
		w := workloads[name]
		if w == nil {
			w = &benchreport.Workload{Benchmark: "replicate", Unit: "barriers", Updated: rep.end.UTC(), Scenarios: map[string]*benchreport.Scenario{}}
			workloads[name] = w
			names = append(names, name)
		}
		p50, p95, p99 := benchreport.Latencies(p.lat)
		w.Scenarios[scenarioName(p.backups, p.delay)] = &benchreport.Scenario{Throughput: p.rate(), P50Ms: p50, P95Ms: p95, P99Ms: p99}
	}
	for _, name := range names {
		if err := benchreport.Merge(dir, name, workloads[name]); err != nil {
			return err
		}
	}
	return nil
}

// sizeKey names a write size in a workload key: empty, 4k, 256k, 1m.
func sizeKey(size int) string {
	if size == 0 {
		return "empty"
	}
	n, unit := inUnits(size)
	if unit == "" {
		unit = "b"
	}
	return fmt.Sprintf("%d%s", n, unit)
}

// scenarioName is pbfs-N, pbfs-N-delay for benchreport.LinkDelay, or
// pbfs-N-delay-<ms>ms for another delay.
func scenarioName(backups int, delay time.Duration) string {
	switch delay {
	case 0:
		return fmt.Sprintf("pbfs-%d", backups)
	case benchreport.LinkDelay:
		return fmt.Sprintf("pbfs-%d-delay", backups)
	}
	return fmt.Sprintf("pbfs-%d-delay-%gms", backups, float64(delay)/1e6)
}
