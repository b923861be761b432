// Command http measures what output commit costs an HTTP service: an
// open-loop load generator with Poisson arrivals sweeps offered rates
// and reports, per rate, the 2xx per second and latency percentiles of
//
//   - direct-plain: the service on a plain directory, no pbfs;
//   - direct-pbfs:  the same service on a pbfs mount replicating to one
//     backup, clients talking to it directly (no output commit);
//   - proxy-pbfs:   the same service and mount, clients going through
//     the http-proxy plugin, every response held for its barrier
//     (--ack all, one backup).
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
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
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
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, *bin, *proxyBin, *rates, *dur, *pool, *barriers, *extra, *workdir, *results); err != nil {
		fmt.Fprintln(os.Stderr, "http benchmark:", err)
		os.Exit(1)
	}
}

type setup struct {
	dir                      string
	procs                    []*benchproc.Proc
	vol                      string
	plain, pbfs, proxy, mets string // addresses
}

func (s *setup) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		if err := s.procs[i].Stop(20 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	for _, m := range benchproc.MountsUnder(s.dir) {
		syscall.Unmount(m, syscall.MNT_DETACH)
	}
	os.RemoveAll(s.dir)
}

func (s *setup) start(name string, env []string, argv ...string) (*benchproc.Proc, error) {
	p, err := benchproc.Start(name, filepath.Join(s.dir, name+".log"), env, argv...)
	if err == nil {
		s.procs = append(s.procs, p)
	}
	return p, err
}

func startAll(ctx context.Context, bin, proxyBin string, pool, barriers int, extra, workdir string) (*setup, error) {
	dir, err := os.MkdirTemp(workdir, "pbfs-http-bench-")
	if err != nil {
		return nil, err
	}
	s := &setup{dir: dir, vol: filepath.Join(dir, "vol")}
	for _, d := range []string{"vol", "bvol", "plain"} {
		os.Mkdir(filepath.Join(dir, d), 0o755)
	}
	var tok [16]byte
	rand.Read(tok[:])
	env := []string{"PBFS_TOKEN=" + hex.EncodeToString(tok[:])}
	addrs := make([]string, 5)
	for i := range addrs {
		if addrs[i], err = benchproc.FreeAddr(); err != nil {
			return s, err
		}
	}
	backupAddr := addrs[0]
	s.plain, s.pbfs, s.proxy, s.mets = addrs[1], addrs[2], addrs[3], addrs[4]
	b, err := s.start("backup", env, bin, "backup", "--listen", backupAddr, "--journal", filepath.Join(dir, "jb"), filepath.Join(dir, "bvol"))
	if err != nil {
		return s, err
	}
	if err := benchproc.WaitListening(ctx, b, backupAddr); err != nil {
		return s, err
	}
	cfg := fmt.Sprintf("http-proxy:listen=%s,upstream=http://%s,metrics=%s,pool=%d,barriers=%d", s.proxy, s.pbfs, s.mets, pool, barriers)
	if extra != "" {
		cfg += "," + extra
	}
	m, err := s.start("primary", env, bin, "mount", "--journal", filepath.Join(dir, "jp"), "--backup", backupAddr, "--ack", "all",
		"--plugin", "http-proxy="+proxyBin, "--plugin-config", cfg, s.vol)
	if err != nil {
		return s, err
	}
	for i := 0; !benchproc.Mounted(s.vol); i++ {
		if m.Exited() || i > 500 {
			return s, fmt.Errorf("the mount did not come up:\n%s", m.LogTail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	svcBin := filepath.Join(dir, "service")
	if out, err := exec.Command("go", "build", "-o", svcBin, "./benchmarks/http/service").CombinedOutput(); err != nil {
		return s, fmt.Errorf("build the service: %v\n%s", err, out)
	}
	os.Mkdir(filepath.Join(s.vol, "kv"), 0o755)
	for _, sv := range []struct{ name, addr, dir string }{{"service-pbfs", s.pbfs, filepath.Join(s.vol, "kv")}, {"service-plain", s.plain, filepath.Join(dir, "plain")}} {
		p, err := s.start(sv.name, nil, svcBin, "-listen", sv.addr, "-dir", sv.dir)
		if err != nil {
			return s, err
		}
		if err := benchproc.WaitListening(ctx, p, sv.addr); err != nil {
			return s, err
		}
	}
	return s, benchproc.WaitListening(ctx, m, s.proxy)
}

func run(ctx context.Context, bin, proxyBin, rateList string, dur time.Duration, pool, barriers int, extra, workdir, resultsDir string) error {
	var rates []float64
	for _, f := range strings.Split(rateList, ",") {
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 {
			return fmt.Errorf("-rates: %q", f)
		}
		rates = append(rates, r)
	}
	s, err := startAll(ctx, bin, proxyBin, pool, barriers, extra, workdir)
	if s != nil {
		defer s.stop()
	}
	if err != nil {
		return err
	}
	targets := []struct{ name, url string }{{"direct-plain", "http://" + s.plain}, {"direct-pbfs", "http://" + s.pbfs}, {"proxy-pbfs", "http://" + s.proxy}}
	client := newClient()
	// Warm up every path once.
	for _, t := range targets {
		openLoop(ctx, client, t.url, 50, time.Second, 1, 4096)
	}
	var all []result
	for i, rate := range rates {
		for _, t := range targets {
			before := benchproc.Scrape(s.mets)
			r := openLoop(ctx, client, t.url, rate, dur, uint64(i+1), 4096)
			r.target = t.name
			if t.name == "proxy-pbfs" {
				proxyStats(&r, before, benchproc.Scrape(s.mets))
			}
			fmt.Printf("%-13s %6.0f/s offered: %7.1f 2xx/s  p50 %8s  p99 %8s  5xx %d  failed %d  dropped %d  group %.1f  barrier %s  hold %s\n",
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
	fmt.Fprintf(&b, "Service: POST 512 B -> write+fsync+rename, answers Connection: close. pbfs: one backup, --ack all. Proxy pool %d, barriers in flight %d, extra config %q.\n\n", pool, barriers, extra)
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

// scenarioOf names a target as summary.json's scenarios do.
var scenarioOf = map[string]string{"direct-plain": "plain", "direct-pbfs": "pbfs-1-no-proxy", "proxy-pbfs": "pbfs-1"}

// charts draws p50 and p99 latency against 2xx/s, one line per target.
func charts(b *strings.Builder, dir, stem string, all []result) error {
	b.WriteString("\n## Charts\n\n")
	for _, q := range []struct {
		name string
		p    float64
	}{{"p50", 0.5}, {"p99", 0.99}} {
		var series []report.Series
		for _, target := range []string{"direct-plain", "direct-pbfs", "proxy-pbfs"} {
			s := report.Series{Name: scenarioOf[target]}
			for _, r := range all {
				if r.target == target && r.ok > 0 {
					s.Points = append(s.Points, report.Point{X: r.goodput(), Y: float64(r.pct(q.p)) / 1e6})
				}
			}
			series = append(series, s)
		}
		file := stem + "-" + q.name + ".png"
		if err := report.Curves(filepath.Join(dir, file), "HTTP output commit: "+q.name+" latency against throughput", "2xx/s", q.name+" latency, ms", series); err != nil {
			return err
		}
		fmt.Fprintf(b, "![%s latency against throughput](%s)\n\n", q.name, file)
	}
	return nil
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
		name := scenarioOf[r.target]
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
