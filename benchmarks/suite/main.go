// Command suite runs every benchmark in one go and writes one report:
// each program's own Markdown and charts, all in one run directory under
// -results-dir, an index (README.md) that tables results/summary.json with
// every scenario's ratio to the plain directory, and summary.json itself,
// also copied to -results-dir/summary.json. `make bench` runs it; `make
// bench-quick` runs it with -quick, short versions of each (under five
// minutes on a 2-core machine). Run from the module root after make build.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/report"
)

// step is one benchmark program with its arguments; dirFlag names its
// results-directory flag.
type step struct {
	name, pkg, dirFlag string
	full, quick        []string
}

func steps(bin, proxy string) []step {
	return []step{
		{"replicate", "./benchmarks/replicate", "-results-dir",
			[]string{"-bin", bin},
			[]string{"-bin", bin, "-rounds", "1", "-duration", "1s", "-sizes", "0,4096,262144", "-delays", "0,500us"}},
		{"http", "./benchmarks/http", "-results",
			[]string{"-bin", bin, "-proxy", proxy},
			[]string{"-bin", bin, "-proxy", proxy, "-rates", "50,100,200", "-duration", "2s"}},
		{"kv", "./benchmarks/kv", "-results-dir",
			[]string{"-bin", bin, "-proxy", proxy},
			[]string{"-bin", bin, "-proxy", proxy, "-keys", "3000", "-reads", "1", "-scenarios", "plain,pbfs-1", "-fd-clients", "300"}},
		{"wordpress", "./benchmarks/wordpress", "-results-dir",
			[]string{"-install", "-bin", bin, "-proxy", proxy},
			[]string{"-install", "-bin", bin, "-proxy", proxy, "-scenarios", "plain,pbfs-1,semisync", "-peak-for", "6s", "-point-for", "5s", "-fractions", "0.5,0.7"}},
		{"sysbench", "./benchmarks/sysbench", "-results-dir",
			[]string{"-bin", bin, "-tune=false"},
			[]string{"-bin", bin, "-quick", "-time", "5s", "-tune=false", "-scenarios", "plain,pbfs-2-replicated", "-workloads", "oltp_write_only"}},
	}
}

func main() {
	quick := flag.Bool("quick", false, "short versions of every benchmark, under five minutes in all")
	bin := flag.String("bin", "bin/pbfs", "pbfs binary")
	proxy := flag.String("proxy", "bin/http-proxy", "http-proxy plugin binary")
	only := flag.String("only", "", "run only these benchmarks (comma-separated: replicate,http,kv,wordpress,sysbench)")
	results := flag.String("results-dir", "benchmarks/results", "where the run's directory and summary.json go")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	kind := "bench"
	if *quick {
		kind = "bench-quick"
	}
	start := time.Now()
	dir := filepath.Join(*results, kind+"-"+start.UTC().Format("2006-01-02-150405"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		os.Exit(1)
	}
	var failed []string
	var ran []string
	for _, s := range steps(*bin, *proxy) {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), s.name) {
			continue
		}
		args := s.full
		if *quick {
			args = s.quick
		}
		argv := append([]string{"run", s.pkg}, args...)
		argv = append(argv, s.dirFlag, dir)
		fmt.Printf("\n### %s: go %s\n", s.name, strings.Join(argv, " "))
		t := time.Now()
		cmd := exec.CommandContext(ctx, "go", argv...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", s.name, err))
		}
		ran = append(ran, fmt.Sprintf("%s (%s)", s.name, time.Since(t).Round(time.Second)))
		if ctx.Err() != nil {
			break
		}
	}
	if err := writeIndex(dir, kind, start, ran, failed); err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		os.Exit(1)
	}
	if data, err := os.ReadFile(filepath.Join(dir, report.SummaryFile)); err == nil {
		os.WriteFile(filepath.Join(*results, report.SummaryFile), data, 0o644)
	}
	fmt.Printf("\nreport: %s (took %s)\n", filepath.Join(dir, "README.md"), time.Since(start).Round(time.Second))
	if len(failed) > 0 {
		fmt.Fprintln(os.Stderr, "suite: failed:", strings.Join(failed, ", "))
		os.Exit(1)
	}
}

// writeIndex tables summary.json and links every report and chart.
func writeIndex(dir, kind string, start time.Time, ran, failed []string) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# pbfs `make %s`, %s\n\n", kind, start.UTC().Format("2006-01-02 15:04:05 UTC"))
	p("- ran: %s\n", strings.Join(ran, ", "))
	if len(failed) > 0 {
		p("- **failed: %s**\n", strings.Join(failed, ", "))
	}
	p("- every figure was measured side by side in this run on this machine; ratios are to the plain-directory scenario of the same workload (docs/PERFORMANCE.md, \"summary.json\")\n\n")
	var s report.Summary
	if data, err := os.ReadFile(filepath.Join(dir, report.SummaryFile)); err == nil {
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(s.Workloads))
	for n := range s.Workloads {
		names = append(names, n)
	}
	slices.Sort(names)
	p("## Summary\n\n| workload | scenario | throughput | ratio to plain | p50 ms | p95 ms | p99 ms | errors |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range names {
		w := s.Workloads[n]
		var scs []string
		for sc := range w.Scenarios {
			scs = append(scs, sc)
		}
		slices.SortFunc(scs, func(a, b string) int {
			if a == report.BaselineScenario {
				return -1
			}
			if b == report.BaselineScenario {
				return 1
			}
			return strings.Compare(a, b)
		})
		for _, sc := range scs {
			v := w.Scenarios[sc]
			ratio := "–"
			if v.RatioToPlain > 0 {
				ratio = fmt.Sprintf("%.2f", v.RatioToPlain)
			}
			p("| %s | %s | %.1f %s/s | %s | %.2f | %.2f | %.2f | %d |\n", n, sc, v.Throughput, w.Unit, ratio, v.P50Ms, v.P95Ms, v.P99Ms, v.Errors)
		}
	}
	p("\n## Reports\n\n")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".md") && e.Name() != "README.md" {
			p("- [%s](%s)\n", e.Name(), e.Name())
		}
	}
	p("\n## Charts\n\n")
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".png") {
			p("![%s](%s)\n\n", e.Name(), e.Name())
		}
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(b.String()), 0o644)
}
