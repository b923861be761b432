package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/report"
)

type kvReport struct {
	commit, fs   string
	cfg          config
	start, end   time.Time
	load0, load1 string
	runs         []*scenarioRun
	fd           *scenarioRun
}

func pctMs(lat []time.Duration, p float64) float64 {
	s := slices.Clone(lat)
	slices.Sort(s)
	return report.Pct(s, p)
}

// workloadOf names a phase's workload in summary.json: the read passes
// pool into one.
func workloadOf(ph string) string {
	if strings.HasPrefix(ph, "read") {
		return "kv-read"
	}
	return "kv-" + ph
}

// pooled merges the phases of one workload.
func pooled(r *scenarioRun, workload string) *phase {
	out := &phase{name: workload}
	for _, ph := range r.phases {
		if workloadOf(ph.name) != workload {
			continue
		}
		out.ok += ph.ok
		out.status5 += ph.status5
		out.status += ph.status
		out.failed += ph.failed
		out.wrong += ph.wrong
		out.elapsed += ph.elapsed
		out.lat = append(out.lat, ph.lat...)
		out.cpuSvc, out.cpuMount, out.cpuBack = out.cpuSvc.Plus(ph.cpuSvc), out.cpuMount.Plus(ph.cpuMount), out.cpuBack.Plus(ph.cpuBack)
		out.client = max(out.client, ph.client)
	}
	return out
}

func perReq(c benchproc.CPU, n int64) string {
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f", float64(c.Total())/float64(n)/1e6)
}

func (rep *kvReport) markdown() string {
	var b strings.Builder
	rep.writeHeader(&b)
	rep.writePhases(&b)
	if len(rep.runs) > 0 && len(rep.runs[0].curve) > 0 {
		rep.writeCurve(&b)
	}
	rep.writeChecks(&b)
	if rep.fd != nil {
		writeFDRun(&b, rep.fd)
	}
	return b.String()
}

// printer is fmt.Fprintf to b.
func printer(b *strings.Builder) func(format string, a ...any) {
	return func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
}

// writeHeader writes the title, the run's shape and machine, and whether
// a check failed.
func (rep *kvReport) writeHeader(b *strings.Builder) {
	cfg := rep.cfg
	p := printer(b)
	p("# Key-value stress (the Voldemort seed's shape), %s\n\n", rep.start.UTC().Format("2006-01-02 15:04:05 UTC"))
	p("- command: `go run ./benchmarks/kv %s`\n", benchproc.ShownArgs(os.Args[1:]))
	p("- %d keys of %d B; an insert pass, an update pass, %d read pass(es) that check every value; %d clients in a closed loop, each with its own kept-alive connection\n",
		cfg.keys, cfg.value, cfg.readPasses, cfg.clients)
	p("- service: POST stores the value with write, fsync and rename, GET reads it (internal/testservice, keep-alive); plain: the service on a plain directory, clients direct; bindfs: on a multithreaded bindfs mount (a C FUSE passthrough) of a plain directory, clients direct, the floor of any FUSE file system (its CPU is in the mount column); pbfs-N: on a pbfs mount with N backups (--ack all), clients through the http-proxy plugin (output commit); pbfs-N-deferred: the same with --fsync deferred (the service's fsyncs return at once; the response's barrier makes its writes durable on the backups before the client sees it); pbfs-N-delay: pbfs-N with %s added each way on every backup's link\n", report.LinkDelay)
	p("- pbfs %s; %s, %d CPUs; work directory on %s; load average at start %s, at end %s; run took %s\n\n",
		rep.commit, runtime.Version(), runtime.NumCPU(), rep.fs, rep.load0, rep.load1, rep.end.Sub(rep.start).Round(time.Second))
	if bad := rep.failedChecks(); len(bad) > 0 {
		p("**FAILED: this run's figures are not results.** %s\n\n", strings.Join(bad, "; "))
	}
}

// writePhases writes each phase's scenarios, with their ratio to plain's
// ok/s in the same phase.
func (rep *kvReport) writePhases(b *strings.Builder) {
	p := printer(b)
	p("## Per phase\n\n")
	p("ok/s: 2xx answers per second (reads: with the right value). Ratio: to plain's ok/s in the same phase. CPU: ms per ok request, from /proc, for the service, the mount with its proxy and flush helper, and all backups together.\n\n")
	p("| phase | scenario | ok/s | ratio to plain | p50 ms | p95 ms | p99 ms | errors | error rate | CPU service | CPU mount + proxy | CPU backups | client vCPU |\n")
	p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var phases []string
	for _, r := range rep.runs {
		for _, ph := range r.phases {
			if !slices.Contains(phases, ph.name) {
				phases = append(phases, ph.name)
			}
		}
	}
	for _, name := range phases {
		var plain float64
		bound := ""
		for _, r := range rep.runs {
			for _, ph := range r.phases {
				if ph.name == name && r.name == "plain" {
					plain = ph.rate()
					if ph.client > benchproc.MaxClientCPU {
						bound = "≤ "
					}
				}
			}
		}
		for _, r := range rep.runs {
			for _, ph := range r.phases {
				if ph.name != name {
					continue
				}
				ratio := "–"
				if plain > 0 {
					ratio = fmt.Sprintf("%s%.2f", bound, ph.rate()/plain)
				}
				n := ph.ok + ph.errors()
				p("| %s | %s | %.0f | %s | %.2f | %.2f | %.2f | %d | %.2f %% | %s | %s | %s | %.2f |\n", name, r.name, ph.rate(), ratio,
					pctMs(ph.lat, 0.5), pctMs(ph.lat, 0.95), pctMs(ph.lat, 0.99), ph.errors(), 100*float64(ph.errors())/float64(max(1, n)),
					perReq(ph.cpuSvc, ph.ok), perReq(ph.cpuMount, ph.ok), perReq(ph.cpuBack, ph.ok), ph.client)
			}
		}
	}
}

// writeCurve writes the updates at each client count.
func (rep *kvReport) writeCurve(b *strings.Builder) {
	p := printer(b)
	p("\n## Update curve\n\nUpdates of the first %d keys at each client count, each client with its own kept-alive connection.\n\n", rep.cfg.curveKeys)
	p("| clients | scenario | ok/s | p50 ms | p95 ms | p99 ms | errors |\n|---:|---|---:|---:|---:|---:|---:|\n")
	for i, n := range rep.cfg.curveClients {
		for _, r := range rep.runs {
			if i < len(r.curve) {
				ph := r.curve[i]
				p("| %d | %s | %.0f | %.2f | %.2f | %.2f | %d |\n", n, r.name, ph.rate(), pctMs(ph.lat, 0.5), pctMs(ph.lat, 0.95), pctMs(ph.lat, 0.99), ph.errors())
			}
		}
	}
}

// writeChecks writes which scenarios the load generator may have bound,
// and each scenario's backups and dead processes.
func (rep *kvReport) writeChecks(b *strings.Builder) {
	p := printer(b)
	p("\n## Checks\n\n")
	if cb := rep.clientBound(); len(cb) > 0 {
		p("- the load generator used more than %.2f vCPU in: %s. Their throughput may be the generator's limit; where that is plain, the ratios are upper bounds (≤).\n",
			benchproc.MaxClientCPU, strings.Join(cb, ", "))
	}
	for _, r := range rep.runs {
		p("- %s: backups %s; processes that died: %s\n", r.name, r.verified, orNone(r.exited))
	}
}

// writeFDRun writes the run under a lowered descriptor limit.
func writeFDRun(b *strings.Builder, r *scenarioRun) {
	p := printer(b)
	p("\n## Under a lowered descriptor limit\n\n")
	p("pbfs-1, the mount and its proxy started under `prlimit --nofile=%d:%d`, %d clients, %d keys (insert, update, one read pass). "+
		"The proxy answers a client it has no descriptor for with a 503 (`pbfs_proxy_shed_total`), and every process must still be running at the end.\n\n",
		r.fdLimit, r.fdLimit, r.clients, r.keys)
	p("| phase | ok/s | p50 ms | p99 ms | 503 and other 5xx | other non-2xx | transport errors | wrong values |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, ph := range r.phases {
		p("| %s | %.0f | %.2f | %.2f | %d | %d | %d | %d |\n", ph.name, ph.rate(), pctMs(ph.lat, 0.5), pctMs(ph.lat, 0.99), ph.status5, ph.status, ph.failed, ph.wrong)
	}
	var reasons []string
	for k, v := range r.shed {
		reasons = append(reasons, fmt.Sprintf("%s %.0f", k, v))
	}
	slices.Sort(reasons)
	p("\n- the proxy's 503s by reason: %s\n- processes that died: %s\n- backups: %s\n", orNone(reasons), orNone(r.exited), r.verified)
	p("- what the failed requests got, by phase:\n")
	for _, ph := range r.phases {
		var kinds []string
		for k, v := range ph.samples {
			kinds = append(kinds, fmt.Sprintf("`%s` × %d", k, v))
		}
		slices.Sort(kinds)
		p("  - %s: %s\n", ph.name, orNone(kinds))
	}
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// failedChecks lists what makes the run's figures untrustworthy: a
// scenario that lost or corrupted a value. (Backups that did not verify
// and processes that died already failed the run.)
func (rep *kvReport) failedChecks() []string {
	var bad []string
	for _, r := range rep.runs {
		for _, ph := range r.phases {
			if ph.wrong > 0 {
				bad = append(bad, fmt.Sprintf("%s %s: %d reads got a wrong value", r.name, ph.name, ph.wrong))
			}
		}
	}
	return bad
}

// clientBound lists the phases whose load generator used more than
// benchproc.MaxClientCPU: their throughput may be the generator's limit,
// so on plain every ratio to them is an upper bound.
func (rep *kvReport) clientBound() []string {
	var out []string
	for _, r := range rep.runs {
		for _, ph := range r.phases {
			if ph.client > benchproc.MaxClientCPU {
				out = append(out, fmt.Sprintf("%s %s (%.2f vCPU)", r.name, ph.name, ph.client))
			}
		}
	}
	return out
}

// write prints the report, and writes it and the summary.json entries to
// dir unless dir is empty.
func (rep *kvReport) write(dir string) error {
	if err := report.Publish(dir, "kv", rep.start, rep.markdown(), rep.charts, rep.failedChecks()); err != nil || dir == "" {
		return err // a failed run is written, but kept out of summary.json
	}
	for _, w := range []string{"kv-insert", "kv-update", "kv-read"} {
		wl := &report.Workload{Benchmark: "kv", Unit: "requests", Updated: rep.end.UTC(), Scenarios: map[string]*report.Scenario{}}
		for _, r := range rep.runs {
			ph := pooled(r, w)
			if ph.elapsed == 0 {
				continue
			}
			p50, p95, p99 := report.Latencies(ph.lat)
			wl.Scenarios[r.name] = &report.Scenario{Throughput: ph.rate(), P50Ms: p50, P95Ms: p95, P99Ms: p99, Errors: ph.errors(),
				ClientBound: ph.client > benchproc.MaxClientCPU}
		}
		if err := report.Merge(dir, w, wl); err != nil {
			return err
		}
	}
	return nil
}

// charts draws the update curve's p50 and p99 latency against throughput,
// one line per scenario, and returns the Markdown that shows them.
func (rep *kvReport) charts(dir, stem string) (string, error) {
	if len(rep.runs) == 0 || len(rep.runs[0].curve) == 0 {
		return "", nil
	}
	return report.LatencyCharts(dir, stem+"-update", "KV updates", "updates/s", func(q float64) []report.Series {
		var series []report.Series
		for _, r := range rep.runs {
			s := report.Series{Name: r.name}
			for _, ph := range r.curve {
				if ph.ok > 0 {
					s.Points = append(s.Points, report.Point{X: ph.rate(), Y: pctMs(ph.lat, q)})
				}
			}
			series = append(series, s)
		}
		return series
	})
}
