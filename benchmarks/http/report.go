package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/report"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e6) }

func writeReport(dir string, peaks map[string]result, all []result, sw sweep, checks []string, pool, barriers int, extra string) error {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# HTTP output commit: closed-loop peaks, then an open-loop Poisson sweep\n\n%s, %d CPUs, %s, host %s, work directory on %s.\n",
		time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), runtime.Version(), host, sw.fsName)
	fmt.Fprintf(&b, "Machine at start: %s. At end: %s.\n", sw.cal[0], sw.cal[1])
	fmt.Fprintf(&b, "pbfs %s. Service: POST 512 B -> write+fsync+rename, answers Connection: close. pbfs-N: N backups, --ack all, clients through the proxy. Proxy pool %d, barriers in flight %d, extra config %q.\n\n", benchproc.Commit(), pool, barriers, extra)
	if len(checks) > 0 {
		fmt.Fprintf(&b, "Checked at the end: %s.\n\n", strings.Join(checks, "; "))
	}
	names := targetNames(all, peaks)
	fmt.Fprintf(&b, "## Peaks\n\nEach target alone, %d clients posting back to back for %s. The generator's vCPU includes the delay proxies of a -delay target; above %.2f the peak is marked client-bound (it may be the generator's limit, and on plain every ratio is then an upper bound).\n\n",
		sw.peakClients, sw.peakFor, benchproc.MaxClientCPU)
	b.WriteString("CPU: ms of CPU (user + system, from /proc) per 2xx answer, for the service / the mount with its flush helper / the proxy / all backups together.\n\n")
	b.WriteString("| target | peak 2xx/s | ÷ plain | p50 ms | p99 ms | 5xx | failed | generator vCPU | CPU ms per 2xx: service / mount / proxy / backups |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, name := range names {
		r, ok := peaks[name]
		if !ok {
			continue
		}
		bound := ""
		if r.client > benchproc.MaxClientCPU {
			bound = " (client-bound)"
		}
		fmt.Fprintf(&b, "| %s | %.1f%s | %s | %s | %s | %d | %d | %.2f | %s |\n", name, r.goodput(), bound, ratio(r.goodput(), peaks["plain"].goodput()),
			ms(r.pct(0.5)), ms(r.pct(0.99)), r.status5, r.failed, r.client, r.cpu)
	}
	how := "fixed offered rates (-rates)"
	if all != nil && all[0].fraction > 0 {
		how = fmt.Sprintf("offered rates at fractions of plain's peak (%.1f/s)", peaks["plain"].goodput())
	}
	fmt.Fprintf(&b, "\n## Open-loop sweep\n\n%s; each cell ran %s, targets interleaved at each rate. Latency is counted from each request's scheduled arrival.\n\n", how, sw.dur)
	b.WriteString("| target | fraction of plain's peak | offered/s | 2xx/s | p50 ms | p90 ms | p99 ms | max ms | 5xx | failed | dropped | barriers/s | responses per barrier | mean barrier ms | mean hold ms | CPU ms per 2xx: service / mount / proxy / backups |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range all {
		px := "| | | |"
		if r.barriers > 0 {
			px = fmt.Sprintf("%.0f | %.1f | %s | %s |", r.barriers/r.duration.Seconds(), r.group, ms(r.barrier), ms(r.hold))
		}
		px += " " + r.cpu + " |"
		frac := "–"
		if r.fraction > 0 {
			frac = fmt.Sprintf("%.2f", r.fraction)
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f | %s | %s | %s | %s | %d | %d | %d | %s\n", r.target, frac, r.rate, r.goodput(),
			ms(r.pct(0.5)), ms(r.pct(0.9)), ms(r.pct(0.99)), ms(r.pct(1)), r.status5, r.failed, r.dropped, px)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	stem := "http-" + time.Now().UTC().Format("2006-01-02-150405")
	if err := charts(&b, dir, stem, all); err != nil {
		return err
	}
	path := filepath.Join(dir, stem+".md")
	fmt.Println("report:", path)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return summarize(dir, peaks, all)
}

func ratio(v, base float64) string {
	if base <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v/base)
}

// targetNames lists the targets in the order they ran.
func targetNames(all []result, peaks map[string]result) []string {
	var names []string
	for _, r := range all {
		if !slices.Contains(names, r.target) {
			names = append(names, r.target)
		}
	}
	for name := range peaks {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// charts draws p50 and p99 latency against 2xx/s, one line per target.
func charts(b *strings.Builder, dir, stem string, all []result) error {
	names := targetNames(all, nil)
	md, err := report.LatencyCharts(dir, stem, "HTTP output commit", "2xx/s", func(q float64) []report.Series {
		var series []report.Series
		for _, target := range names {
			s := report.Series{Name: target}
			for _, r := range all {
				if r.target == target && r.ok > 0 {
					s.Points = append(s.Points, report.Point{X: r.goodput(), Y: float64(r.pct(q)) / 1e6})
				}
			}
			series = append(series, s)
		}
		return series
	})
	b.WriteString(md)
	return err
}

// summarize writes the workload to summary.json: each target's
// closed-loop peak and its ratio to plain's, and its latency at the
// open-loop point nearest 70 % of plain's peak (with -rates: at the
// highest rate every target served without errors).
func summarize(dir string, peaks map[string]result, all []result) error {
	at := pointAt(all)
	wl := &report.Workload{Benchmark: "http", Unit: "requests", Updated: time.Now().UTC(), Scenarios: map[string]*report.Scenario{}}
	for name, p := range peaks {
		wl.Scenarios[name] = &report.Scenario{Throughput: p.goodput(), Errors: int64(p.status5 + p.failed),
			ClientBound: p.client > benchproc.MaxClientCPU}
	}
	for _, r := range all {
		sc := wl.Scenarios[r.target]
		if sc == nil {
			sc = &report.Scenario{}
			wl.Scenarios[r.target] = sc
		}
		sc.Errors += int64(r.status5 + r.failed + r.dropped)
		if r.rate == at {
			sc.P50Ms, sc.P95Ms, sc.P99Ms = float64(r.pct(0.5))/1e6, float64(r.pct(0.95))/1e6, float64(r.pct(0.99))/1e6
		}
	}
	if plain := wl.Scenarios["plain"]; plain != nil && plain.Throughput > 0 {
		for _, sc := range wl.Scenarios {
			sc.RatioToPlain = sc.Throughput / plain.Throughput
		}
	}
	return report.Merge(dir, "http-output-commit", wl)
}

// pointAt is the offered rate summary.json takes latencies at: the one
// nearest 70 % of plain's peak, or, in a -rates sweep, the highest rate
// every target served without errors (the lowest if none did).
func pointAt(all []result) float64 {
	at, best := -1.0, math.Inf(1)
	for _, r := range all {
		if r.fraction > 0 && math.Abs(r.fraction-0.7) < best {
			at, best = r.rate, math.Abs(r.fraction-0.7)
		}
	}
	if at >= 0 {
		return at
	}
	clean := map[float64]bool{}
	for _, r := range all {
		if _, ok := clean[r.rate]; !ok {
			clean[r.rate] = true
		}
		if r.status5+r.failed+r.dropped > 0 {
			clean[r.rate] = false
		}
	}
	for rate, ok := range clean {
		if ok && rate > at {
			at = rate
		}
	}
	if at < 0 && len(all) > 0 {
		at = all[0].rate
	}
	return at
}
