package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/report"
)

type wpReport struct {
	commit, fs   string
	cfg          config
	start, end   time.Time
	load0, load1 string
	cal0, cal1   benchproc.Calibration
	runs         []*scenarioRun
}

func perReq(c benchproc.CPU, n int) string {
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", float64(c.Total())/float64(n)/1e6)
}

func (rep *wpReport) markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	cfg := rep.cfg
	p("# WordPress wp.editPost, %s\n\n", rep.start.UTC().Format("2006-01-02 15:04:05 UTC"))
	p("- command: `go run ./benchmarks/wordpress %s`\n", benchproc.ShownArgs(os.Args[1:]))
	p("- Debian's wordpress, nginx and php-fpm (%d workers), MariaDB with its data directory on the scenario's storage; %d seeded posts edited round-robin through XML-RPC\n", cfg.fpm, cfg.posts)
	p("- plain: clients talk to nginx directly; pbfs-N: MariaDB's data directory on a pbfs mount with N backups (--ack all), clients through the http-proxy plugin; pbfs-N-delay: the same with %s added each way on every backup's link; semisync: MariaDB's semi-synchronous replication (AFTER_SYNC, sync_binlog=1) to two replicas on plain directories, clients direct, the replicas' CPU in the backups column\n", report.LinkDelay)
	p("- suffixes: -deferred, the mount runs with --fsync deferred (MariaDB's fsyncs return at once; the proxy's barrier makes each response's writes durable); -ack1-memory, with --ack 1 --ack-level memory; -direct, clients bypass the proxy (no output commit: not a setup to run)\n")
	p("- what an answered request survives: pbfs-N (and -deferred) the loss of the primary and of every backup but one, power included (each backup has synced it); -ack1-memory the crash of any one machine, not a power loss of all (one backup has received and checked it, not synced it: semi-sync's guarantee); semisync the crash of any one machine and a power loss of all (the primary has synced the transaction to its binary log and one replica has received its events into its relay log, not synced them)\n")
	p("- peak: %d editors in a closed loop for %s; then an open-loop Poisson client at %v of plain's peak for %s each, latency counted from when each request was due\n",
		cfg.clients, cfg.peakFor, cfg.fractions, cfg.pointFor)
	p("- pbfs %s; %s, %d CPUs; work directory on %s; load average at start %s, at end %s; run took %s\n",
		rep.commit, runtime.Version(), runtime.NumCPU(), rep.fs, rep.load0, rep.load1, rep.end.Sub(rep.start).Round(time.Second))
	p("- machine at start: %s\n- machine at end: %s\n\n", rep.cal0, rep.cal1)
	if bad := rep.failedChecks(); len(bad) > 0 {
		p("**FAILED: this run's figures are not results.** %s\n\n", strings.Join(bad, "; "))
	}
	if cfg.rounds > 1 {
		p("%s", rep.medians())
	}
	p("## Peak\n\n| scenario | editPost/s | ratio to plain | p50 ms | p95 ms | p99 ms | failed | client vCPU | CPU ms/request: nginx + php-fpm | mariadbd | pbfs mount + proxy | backups or replicas | all replication | journal stored B/request | shipped B/request/backup |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.runs {
		pt := r.peak
		ratio := "–"
		if plain := rep.plainOf(r); plain != nil && plain.peak.rate > 0 {
			ratio = fmt.Sprintf("%.2f", pt.rate/plain.peak.rate)
		}
		stored, shipped := "–", "–"
		if r.backups >= 0 && pt.ok > 0 {
			stored = fmt.Sprintf("%.0f", pt.stored/float64(pt.ok))
			if r.backups > 0 {
				shipped = fmt.Sprintf("%.0f", pt.shipped/float64(pt.backupsOr1(r))/float64(pt.ok))
			}
		}
		p("| %s | %.1f | %s | %.1f | %.1f | %.1f | %d | %.2f | %s | %s | %s | %s | %s | %s | %s |\n", rep.label(r), pt.rate, ratio,
			report.Pct(pt.lat, 0.5), report.Pct(pt.lat, 0.95), report.Pct(pt.lat, 0.99), pt.fail, pt.client,
			perReq(pt.cpuWeb, pt.ok), perReq(pt.cpuDB, pt.ok), perReq(pt.cpuMount, pt.ok), perReq(pt.cpuBackup, pt.ok),
			perReq(pt.cpuMount.Plus(pt.cpuBackup), pt.ok), stored, shipped)
	}
	p("\n## Latency against offered load\n\nThe same offered rates for every scenario, as fractions of plain's peak.\n\n")
	p("| offered/s | scenario | editPost/s | p50 ms | p95 ms | p99 ms | p50 minus plain's, ms | failed | all replication CPU ms/request |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for i := range cfg.fractions {
		for _, r := range rep.runs {
			if i >= len(r.points) {
				continue
			}
			pt := r.points[i]
			diff := "–"
			if plain := rep.plainOf(r); plain != nil && i < len(plain.points) && r != plain {
				diff = fmt.Sprintf("%+.1f", report.Pct(pt.lat, 0.5)-report.Pct(plain.points[i].lat, 0.5))
			}
			p("| %.1f | %s | %.1f | %.1f | %.1f | %.1f | %s | %d | %s |\n", pt.offered, rep.label(r), pt.rate,
				report.Pct(pt.lat, 0.5), report.Pct(pt.lat, 0.95), report.Pct(pt.lat, 0.99), diff, pt.fail,
				perReq(pt.cpuMount.Plus(pt.cpuBackup), pt.ok))
		}
	}
	p("\n## Checks\n\n")
	for _, r := range rep.runs {
		p("- %s: backups %s\n", rep.label(r), r.verified)
	}
	return b.String()
}

// maxLate is how late the open-loop generator may send its p99 request
// before the run counts as limited by the generator rather than the site,
// or 5 % of the point's p50 latency when that is more.
const maxLate = 10 * time.Millisecond

// failedChecks lists what makes the run's figures untrustworthy: an
// open-loop generator that could not keep its schedule. (WordPress costs
// tens of ms of CPU per request; its generator uses a few percent of a
// vCPU, which the report shows.)
func (rep *wpReport) failedChecks() []string {
	var bad []string
	for _, r := range rep.runs {
		for _, pt := range append([]*point{r.peak}, r.points...) {
			// Late sends shift every latency by up to that much: what
			// matters is lateness against the latency measured (an
			// overloaded site queues for seconds, and a saturated machine
			// delays the generator's timers by a few ms).
			allowed := max(maxLate, time.Duration(report.Pct(pt.lat, 0.5)*float64(time.Millisecond))/20)
			if pt.lateP99 > allowed {
				bad = append(bad, fmt.Sprintf("%s at %.1f/s: the generator sent its p99 request %v late (over %v)", r.name, pt.offered, pt.lateP99.Round(time.Millisecond), allowed.Round(time.Millisecond)))
			}
		}
	}
	return bad
}

func (pt *point) backupsOr1(r *scenarioRun) int { return max(1, r.backups) }

// write prints the report and writes it, and the workload's entry in
// summary.json (throughput at peak; latency at the point nearest 70 % of
// plain's peak), to dir unless dir is empty.
func (rep *wpReport) write(dir string) error {
	if err := report.Publish(dir, "wordpress", rep.start, rep.markdown(), rep.charts, rep.failedChecks()); err != nil || dir == "" {
		return err // a failed run is written, but kept out of summary.json
	}
	at := 0
	for i, f := range rep.cfg.fractions {
		if abs(f-0.7) < abs(rep.cfg.fractions[at]-0.7) {
			at = i
		}
	}
	wl := &report.Workload{Benchmark: "wordpress", Unit: "requests", Updated: rep.end.UTC(), Scenarios: map[string]*report.Scenario{}}
	for _, name := range rep.cfg.scenarios {
		r := rep.medianRun(name) // each scenario's median round
		sc := &report.Scenario{Throughput: r.peak.rate, Errors: int64(r.peak.fail)}
		if at < len(r.points) {
			pt := r.points[at]
			sc.P50Ms, sc.P95Ms, sc.P99Ms = report.Pct(pt.lat, 0.5), report.Pct(pt.lat, 0.95), report.Pct(pt.lat, 0.99)
		}
		wl.Scenarios[r.name] = sc
	}
	return report.Merge(dir, "wordpress-editpost", wl)
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// charts draws p50 and p99 latency against achieved throughput, one line
// per scenario (its open-loop points and its peak), and returns the
// Markdown that shows them.
func (rep *wpReport) charts(dir, stem string) (string, error) {
	return report.LatencyCharts(dir, stem, "WordPress wp.editPost", "editPost/s", func(q float64) []report.Series {
		var series []report.Series
		for _, r := range rep.runs {
			s := report.Series{Name: rep.label(r)}
			for _, pt := range append(append([]*point{}, r.points...), r.peak) {
				if pt.ok > 0 {
					s.Points = append(s.Points, report.Point{X: pt.rate, Y: report.Pct(pt.lat, q)})
				}
			}
			series = append(series, s)
		}
		return series
	})
}
