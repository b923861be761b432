// Command http measures what output commit costs an HTTP service: an
// open-loop load generator with Poisson arrivals sweeps offered rates
// and reports, per rate, the 2xx per second and latency percentiles of
// each scenario, side by side (interleaved at each rate):
//
//   - plain:           the service on a plain directory, no pbfs;
//   - pbfs-N:          the service on a pbfs mount replicating to N
//     backups (--ack all), clients going through the http-proxy plugin,
//     every response held for its barrier;
//   - pbfs-N-delay:    the same with 0.5 ms added each way to every backup;
//   - pbfs-N-no-proxy: the same mount, clients talking to the service
//     directly (no output commit).
//
// The service (benchmarks/http/service) stores each POST with write,
// fsync and rename, and answers "Connection: close". All processes are
// real and run on this machine. Run from the module root after make build:
//
//	go run ./benchmarks/http                 # about 2 minutes with the defaults
//	go run ./benchmarks/http -h              # the settings
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/report"
)

func main() {
	bin := flag.String("bin", "bin/pbfs", "pbfs binary")
	proxyBin := flag.String("proxy", "bin/http-proxy", "http-proxy plugin binary")
	rates := flag.String("rates", "100,200,400,800,1600", "offered rates to sweep, requests per second")
	dur := flag.Duration("duration", 5*time.Second, "time at each rate and target")
	pool := flag.Int("pool", 16, "the proxy's upstream pool")
	barriers := flag.Int("barriers", 1, "the proxy's barriers in flight")
	extra := flag.String("proxy-config", "", "more http-proxy configuration, key=value,...")
	workdir := flag.String("workdir", "/var/tmp", "where to make the run's directory")
	results := flag.String("results", "benchmarks/results", "where to write the report")
	scenarios := flag.String("scenarios", "plain,pbfs-1-no-proxy,pbfs-0,pbfs-1,pbfs-2,pbfs-2-delay",
		"scenarios, side by side at each rate: plain, pbfs-N (through the proxy), pbfs-N-delay (0.5 ms each way to every backup), pbfs-N-no-proxy (clients direct)")
	flag.Parse()
	for _, sc := range strings.Split(*scenarios, ",") {
		if _, _, _, err := parseScenario(sc); err != nil {
			fmt.Fprintln(os.Stderr, "http benchmark:", err)
			os.Exit(2)
		}
	}
	if _, err := benchproc.CheckWorkdir(*workdir); err != nil {
		fmt.Fprintln(os.Stderr, "http benchmark:", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, *bin, *proxyBin, *rates, strings.Split(*scenarios, ","), *dur, *pool, *barriers, *extra, *workdir, *results); err != nil {
		fmt.Fprintln(os.Stderr, "http benchmark:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, bin, proxyBin, rateList string, scenarios []string, dur time.Duration, pool, barriers int, extra, workdir, resultsDir string) error {
	var rates []float64
	for _, f := range strings.Split(rateList, ",") {
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 {
			return fmt.Errorf("-rates: %q", f)
		}
		rates = append(rates, r)
	}
	s, err := startAll(ctx, bin, proxyBin, scenarios, pool, barriers, extra, workdir)
	if s != nil {
		defer s.stop()
	}
	if err != nil {
		return err
	}
	targets := s.targets
	client := newClient()
	// Warm up every path once.
	for _, t := range targets {
		openLoop(ctx, client, t.url, 50, time.Second, 1, 4096)
	}
	var all []result
	for i, rate := range rates {
		for _, t := range targets {
			before := benchproc.Scrape(t.metrics)
			r := openLoop(ctx, client, t.url, rate, dur, uint64(i+1), 4096)
			r.target = t.name
			if t.metrics != "" {
				proxyStats(&r, before, benchproc.Scrape(t.metrics))
			}
			fmt.Printf("%-16s %6.0f/s offered: %7.1f 2xx/s  p50 %8s  p99 %8s  5xx %d  failed %d  dropped %d  group %.1f  barrier %s  hold %s\n",
				r.target, r.rate, r.goodput(), r.pct(0.50).Round(10*time.Microsecond), r.pct(0.99).Round(10*time.Microsecond),
				r.status5, r.failed, r.dropped, r.group, r.barrier.Round(10*time.Microsecond), r.hold.Round(10*time.Microsecond))
			all = append(all, r)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return writeReport(resultsDir, all, dur, pool, barriers, extra)
}

// proxyStats fills r's proxy columns from the metrics before and after.
func proxyStats(r *result, before, after map[string]float64) {
	mean := func(name string) float64 {
		n := after[name+"_count"] - before[name+"_count"]
		if n <= 0 {
			return 0
		}
		return (after[name+"_sum"] - before[name+"_sum"]) / n
	}
	r.group = mean("pbfs_proxy_barrier_group_size")
	r.barrier = time.Duration(mean("pbfs_proxy_barrier_seconds") * float64(time.Second))
	r.hold = time.Duration(mean("pbfs_proxy_hold_seconds") * float64(time.Second))
	r.barriers = after["pbfs_proxy_barrier_seconds_count"] - before["pbfs_proxy_barrier_seconds_count"]
}

func writeReport(dir string, all []result, dur time.Duration, pool, barriers int, extra string) error {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# HTTP output commit: open-loop Poisson sweep\n\n%s, %d CPUs, %s, host %s. Each cell ran %s; targets interleaved at each rate.\n",
		time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), runtime.Version(), host, dur)
	fmt.Fprintf(&b, "pbfs %s. Service: POST 512 B -> write+fsync+rename, answers Connection: close. pbfs-N: N backups, --ack all, clients through the proxy. Proxy pool %d, barriers in flight %d, extra config %q.\n\n", benchproc.Commit(), pool, barriers, extra)
	b.WriteString("| target | offered/s | 2xx/s | p50 ms | p90 ms | p99 ms | max ms | 5xx | failed | dropped | barriers/s | responses per barrier | mean barrier ms | mean hold ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e6) }
	for _, r := range all {
		px := "| | | |"
		if r.barriers > 0 {
			px = fmt.Sprintf("%.0f | %.1f | %s | %s |", r.barriers/r.duration.Seconds(), r.group, ms(r.barrier), ms(r.hold))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.1f | %s | %s | %s | %s | %d | %d | %d | %s\n", r.target, r.rate, r.goodput(),
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
	return summarize(dir, all)
}

// charts draws p50 and p99 latency against 2xx/s, one line per target.
func charts(b *strings.Builder, dir, stem string, all []result) error {
	var names []string
	for _, r := range all {
		if !slices.Contains(names, r.target) {
			names = append(names, r.target)
		}
	}
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

// summarize writes the workload to summary.json: each target's best
// goodput, and its latency at the highest rate every target served
// without errors (or the lowest rate, if none did).
func summarize(dir string, all []result) error {
	clean := map[float64]bool{}
	for _, r := range all {
		if _, ok := clean[r.rate]; !ok {
			clean[r.rate] = true
		}
		if r.status5+r.failed+r.dropped > 0 {
			clean[r.rate] = false
		}
	}
	at := -1.0
	for rate, ok := range clean {
		if ok && rate > at {
			at = rate
		}
	}
	wl := &report.Workload{Benchmark: "http", Unit: "requests", Updated: time.Now().UTC(), Scenarios: map[string]*report.Scenario{}}
	for _, r := range all {
		name := r.target
		sc := wl.Scenarios[name]
		if sc == nil {
			sc = &report.Scenario{}
			wl.Scenarios[name] = sc
		}
		sc.Throughput = max(sc.Throughput, r.goodput())
		sc.Errors += int64(r.status5 + r.failed + r.dropped)
		if r.rate == at || (at < 0 && sc.P50Ms == 0) {
			sc.P50Ms, sc.P95Ms, sc.P99Ms = float64(r.pct(0.5))/1e6, float64(r.pct(0.95))/1e6, float64(r.pct(0.99))/1e6
		}
	}
	return report.Merge(dir, "http-output-commit", wl)
}
