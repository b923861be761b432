// Command suite runs every benchmark in one go and writes one report:
// the file-system microbenchmarks (benchmarks/fs/run.sh) and each
// program's own Markdown and charts, all in one run directory under
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

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/report"
)

// step is one benchmark program with its arguments; dirFlag names its
// results-directory flag. A step with a script instead of a package runs
// it with bash, its settings in the environment (env, quickEnv) and the
// results directory in BENCH_RESULTS_DIR.
type step struct {
	name, pkg, dirFlag string
	full, quick        []string
	script             string
	env, quickEnv      []string
}

func steps(bin, proxy string) []step {
	return []step{
		{name: "fs", script: "benchmarks/fs/run.sh", env: []string{"PBFS_BIN=" + bin},
			quickEnv: []string{"PBFS_BIN=" + bin, "BENCH_CONFIGS=plain pbfs", "BENCH_JOBS=randwrite smallfiles sqlite",
				"BENCH_SECONDS=3", "BENCH_FILES=2000", "BENCH_SMALL_SECONDS=5", "BENCH_SQLITE_TX=300", "BENCH_SETTLE=0"}},
		{name: "replicate", pkg: "./benchmarks/replicate", dirFlag: "-results-dir",
			full:  []string{"-bin", bin},
			quick: []string{"-bin", bin, "-rounds", "1", "-duration", "1s", "-sizes", "0,4096,262144", "-delays", "0,500us"}},
		// The replicated commit itself: each barrier a fsync(2) under
		// --fsync replicated (summary.json's fsync-* workloads).
		{name: "replicate-fsync", pkg: "./benchmarks/replicate", dirFlag: "-results-dir",
			full:  []string{"-bin", bin, "-via", "fsync", "-delays", "0"},
			quick: []string{"-bin", bin, "-via", "fsync", "-rounds", "1", "-duration", "1s", "-sizes", "4096", "-delays", "0"}},
		{name: "http", pkg: "./benchmarks/http", dirFlag: "-results",
			full:  []string{"-bin", bin, "-proxy", proxy},
			quick: []string{"-bin", bin, "-proxy", proxy, "-fractions", "0.5,0.9", "-peak-for", "2s", "-duration", "2s", "-scenarios", "plain,pbfs-1-no-proxy,pbfs-1"}},
		{name: "kv", pkg: "./benchmarks/kv", dirFlag: "-results-dir",
			full:  []string{"-bin", bin, "-proxy", proxy},
			quick: []string{"-bin", bin, "-proxy", proxy, "-keys", "3000", "-reads", "1", "-scenarios", "plain,pbfs-1", "-fd-clients", "300", "-curve-clients", "4,32", "-curve-keys", "400"}},
		{name: "wordpress", pkg: "./benchmarks/wordpress", dirFlag: "-results-dir",
			full:  []string{"-install", "-bin", bin, "-proxy", proxy},
			quick: []string{"-install", "-bin", bin, "-proxy", proxy, "-scenarios", "plain,pbfs-1-deferred,semisync", "-peak-for", "6s", "-point-for", "5s", "-fractions", "0.5,0.7"}},
		{name: "sysbench", pkg: "./benchmarks/sysbench", dirFlag: "-results-dir",
			full:  []string{"-bin", bin, "-tune=false"},
			quick: []string{"-bin", bin, "-quick", "-time", "5s", "-tune=false", "-scenarios", "plain,pbfs-2-replicated", "-workloads", "oltp_write_only"}},
	}
}

func main() {
	quick := flag.Bool("quick", false, "short versions of every benchmark, under five minutes in all")
	bin := flag.String("bin", "bin/pbfs", "pbfs binary")
	proxy := flag.String("proxy", "bin/http-proxy", "http-proxy plugin binary")
	only := flag.String("only", "", "run only these benchmarks (comma-separated: fs,replicate,replicate-fsync,http,kv,wordpress,sysbench)")
	results := flag.String("results-dir", "benchmarks/results", "where the run's directory and summary.json go")
	install := flag.Bool("install", false, "apt-get install the tools the benchmarks need when missing (fio, sqlite3, sysbench, mariadb-server; wordpress installs its own)")
	flag.Parse()
	if *install {
		if err := installTools(); err != nil {
			fmt.Fprintln(os.Stderr, "suite:", err)
			os.Exit(1)
		}
	}
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
		args, env := s.full, s.env
		if *quick {
			args, env = s.quick, s.quickEnv
		}
		var cmd *exec.Cmd
		if s.script != "" {
			env = append(env, "BENCH_RESULTS_DIR="+dir)
			fmt.Printf("\n### %s: %s bash %s\n", s.name, strings.Join(env, " "), s.script)
			cmd = exec.CommandContext(ctx, "bash", s.script)
		} else {
			argv := append(append([]string{"run", s.pkg}, args...), s.dirFlag, dir)
			fmt.Printf("\n### %s: go %s\n", s.name, strings.Join(argv, " "))
			cmd = exec.CommandContext(ctx, "go", argv...)
		}
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		t := time.Now()
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
				if base := w.Scenarios[report.BaselineScenario]; base != nil && base.ClientBound && sc != report.BaselineScenario {
					ratio = "≤ " + ratio // plain was limited by its load generator
				}
			}
			name := sc
			if v.ClientBound {
				name += " (client-bound)"
			}
			lat := fmt.Sprintf("%.2f | %.2f | %.2f", v.P50Ms, v.P95Ms, v.P99Ms)
			if v.P50Ms == 0 && v.P95Ms == 0 && v.P99Ms == 0 {
				lat = "– | – | –" // not measured (the fs jobs)
			}
			p("| %s | %s | %.1f %s/s | %s | %s | %d |\n", n, name, v.Throughput, w.Unit, ratio, lat, v.Errors)
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

// tools are the Debian packages the suite's benchmarks run.
var tools = []string{"fio", "sqlite3", "sysbench", "mariadb-server"}

// installTools installs the missing ones, non-interactively.
func installTools() error { return benchproc.InstallPackages(benchproc.MissingPackages(tools)) }
