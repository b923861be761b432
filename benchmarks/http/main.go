// Command http measures what output commit costs an HTTP service. It first
// finds each scenario's peak with a closed loop (-peak-clients clients
// posting back to back), then an open-loop load generator with Poisson
// arrivals offers fractions of plain's peak (-fractions; or fixed -rates)
// and reports, per rate, the 2xx per second and latency percentiles of
// each scenario, side by side (interleaved at each rate):
//
//   - plain:           the service on a plain directory, no pbfs;
//   - pbfs-N:          the service on a pbfs mount replicating to N
//     backups (--ack all), clients going through the http-proxy plugin,
//     every response held for its barrier;
//   - pbfs-N-delay:    the same with 0.5 ms added each way to every backup;
//   - pbfs-N-no-proxy: the same mount, clients talking to the service
//     directly (no output commit);
//   - pbfs-N-deferred: pbfs-N with --fsync deferred (the service's fsyncs
//     return at once; the proxy's barriers make its writes durable).
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
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/prologue"
)

func main() {
	bin := flag.String("bin", "bin/pbfs", "pbfs binary")
	proxyBin := flag.String("proxy", "bin/http-proxy", "http-proxy plugin binary")
	rates := flag.String("rates", "", "offered rates to sweep, requests per second, instead of -fractions of plain's peak")
	fractions := flag.String("fractions", "0.25,0.5,0.7,0.9", "offered rates to sweep, as fractions of plain's closed-loop peak")
	peakFor := flag.Duration("peak-for", 5*time.Second, "how long each scenario's closed-loop peak is measured")
	peakClients := flag.Int("peak-clients", 32, "clients of the closed loop that finds each scenario's peak")
	dur := flag.Duration("duration", 5*time.Second, "time at each rate and target")
	pool := flag.Int("pool", 16, "the proxy's upstream pool")
	barriers := flag.Int("barriers", 1, "the proxy's barriers in flight")
	extra := flag.String("proxy-config", "", "more http-proxy configuration, key=value,...")
	workdir := flag.String("workdir", "/var/tmp", "where to make the run's directory")
	results := flag.String("results", "benchmarks/results", "where to write the report")
	scenarios := flag.String("scenarios", "plain,pbfs-1-no-proxy,pbfs-0,pbfs-1,pbfs-2,pbfs-2-delay",
		"scenarios, side by side at each rate: plain, pbfs-N (through the proxy), pbfs-N-delay (0.5 ms each way to every backup), pbfs-N-no-proxy (clients direct), pbfs-N-deferred (through the proxy, --fsync deferred)")
	flag.Parse()
	for _, sc := range strings.Split(*scenarios, ",") {
		if _, err := parseScenario(sc); err != nil {
			fmt.Fprintln(os.Stderr, "http benchmark:", err)
			os.Exit(2)
		}
	}
	fsName, err := prologue.Workdir(*workdir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "http benchmark:", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	sw := sweep{rates: *rates, fractions: *fractions, dur: *dur, peakFor: *peakFor, peakClients: *peakClients, fsName: fsName}
	sw.cal[0] = benchproc.Calibrate(*workdir)
	if err := run(ctx, *bin, *proxyBin, sw, strings.Split(*scenarios, ","), *pool, *barriers, *extra, *workdir, *results); err != nil {
		fmt.Fprintln(os.Stderr, "http benchmark:", err)
		os.Exit(1)
	}
}

// sweep is what run measures: each target's peak, then the open-loop
// rates (fixed, or fractions of plain's peak), dur each.
type sweep struct {
	rates, fractions string
	dur, peakFor     time.Duration
	peakClients      int
	fsName           string                   // the work directory's file system
	cal              [2]benchproc.Calibration // the machine at the start and at the end
}

// parseList parses comma-separated positive numbers.
func parseList(flagName, list string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("-%s: %q", flagName, f)
		}
		out = append(out, v)
	}
	return out, nil
}

// quietTimeWait is how many TIME_WAIT sockets a peak measurement tolerates.
const quietTimeWait = 5000

func run(ctx context.Context, bin, proxyBin string, sw sweep, scenarios []string, pool, barriers int, extra, workdir, resultsDir string) error {
	var rates, fractions []float64
	var err error
	if sw.rates != "" {
		rates, err = parseList("rates", sw.rates)
	} else {
		fractions, err = parseList("fractions", sw.fractions)
	}
	if err != nil {
		return err
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
	peaks, err := measurePeaks(ctx, client, targets, sw)
	if err != nil {
		return err
	}
	base, ok := peaks["plain"]
	if fractions != nil && (!ok || base.goodput() <= 0) {
		return fmt.Errorf("-fractions needs a plain scenario with a peak above 0 (got %.1f/s); use -rates", base.goodput())
	}
	for _, f := range fractions {
		rates = append(rates, f*base.goodput())
	}
	all, err := sweepRates(ctx, client, targets, sw, rates, fractions)
	if err != nil {
		return err
	}
	checks, err := verifyBackups(s, targets)
	if err != nil {
		return err
	}
	sw.cal[1] = benchproc.Calibrate(workdir)
	return writeReport(resultsDir, peaks, all, sw, checks, pool, barriers, extra)
}

// measurePeaks measures each target's closed-loop peak, by target name.
func measurePeaks(ctx context.Context, client *http.Client, targets []target, sw sweep) (map[string]result, error) {
	peaks := map[string]result{}
	for _, t := range targets {
		// Sockets left in TIME_WAIT by an earlier run or target slow the
		// search for a free port: a peak is measured without them.
		if n, waited := benchproc.QuietTCP(quietTimeWait, 65*time.Second); waited >= time.Second {
			fmt.Printf("waited %v for TIME_WAIT sockets to drain (%d left)\n", waited.Round(time.Second), n)
		}
		u0 := t.usage()
		r := closedLoop(ctx, client, t.url, sw.peakClients, sw.peakFor, 7)
		r.target = t.name
		r.cpu = t.usage().minus(u0).perRequest(t, r.ok)
		peaks[t.name] = r
		fmt.Printf("%-16s peak (closed loop, %d clients): %7.1f 2xx/s  p50 %8s  p99 %8s  5xx %d  failed %d  CPU ms/2xx %s\n",
			t.name, sw.peakClients, r.goodput(), r.pct(0.50).Round(10*time.Microsecond), r.pct(0.99).Round(10*time.Microsecond), r.status5, r.failed, r.cpu)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return peaks, nil
}

// sweepRates runs every target open-loop at each rate in turn, the
// targets interleaved at each rate; fractions, when given, are the rates
// as fractions of plain's peak.
func sweepRates(ctx context.Context, client *http.Client, targets []target, sw sweep, rates, fractions []float64) ([]result, error) {
	var all []result
	for i, rate := range rates {
		for _, t := range targets {
			before, u0 := benchproc.Scrape(t.metrics), t.usage()
			r := openLoop(ctx, client, t.url, rate, sw.dur, uint64(i+1), 4096)
			r.target = t.name
			r.cpu = t.usage().minus(u0).perRequest(t, r.ok)
			if fractions != nil {
				r.fraction = fractions[i]
			}
			if t.metrics != "" {
				proxyStats(&r, before, benchproc.Scrape(t.metrics))
			}
			fmt.Printf("%-16s %6.0f/s offered: %7.1f 2xx/s  p50 %8s  p99 %8s  5xx %d  failed %d  dropped %d  group %.1f  barrier %s  hold %s\n",
				r.target, r.rate, r.goodput(), r.pct(0.50).Round(10*time.Microsecond), r.pct(0.99).Round(10*time.Microsecond),
				r.status5, r.failed, r.dropped, r.group, r.barrier.Round(10*time.Microsecond), r.hold.Round(10*time.Microsecond))
			all = append(all, r)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	return all, nil
}

// verifyBackups checks that each pbfs scenario's backups hold what its
// primary holds, or the numbers count work that was not done.
func verifyBackups(s *setup, targets []target) ([]string, error) {
	var checks []string
	for _, t := range targets {
		if c := s.clusterOf[t.name]; c != nil {
			got, err := c.Verify()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", t.name, err)
			}
			checks = append(checks, t.name+": "+got)
		}
	}
	return checks, nil
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
