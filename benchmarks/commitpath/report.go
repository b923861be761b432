package main

import (
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/prologue"
)

// report is the run's Markdown: the median traced commit's path step by
// step, then what every traced commit's path held.
func report(cfg config, untraced []time.Duration, commits []commit) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# A replicated commit's critical path, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04:05 UTC"))
	p("- command: `go run ./benchmarks/commitpath %s`\n", benchproc.ShownArgs(os.Args[1:]))
	p("- a %d B pwrite and fdatasync on a mount with `--fsync replicated`, %d backup(s), `--ack all`, ack level %s; pause between commits %v\n",
		cfg.size, cfg.backups, orDefault(cfg.ackLevel, "disk"), cfg.gap)
	p("- pbfs %s; %s, %d CPUs, kernel %s; load average %s\n", benchproc.Commit(), runtime.Version(), runtime.NumCPU(), prologue.Kernel(), benchproc.LoadAvg())
	if len(untraced) > 0 {
		p("- untraced: %d commits, p50 %s, p99 %s\n", len(untraced), ms(pct(untraced, 0.5)), ms(pct(untraced, 0.99)))
	}
	byLat := slices.Clone(commits)
	sort.Slice(byLat, func(i, j int) bool { return byLat[i].latency() < byLat[j].latency() })
	med := byLat[len(byLat)/2]
	p("- traced (perf record of the scheduler and system calls, every CPU): %d commits, p50 %.3f ms; tracing slows each step\n\n",
		len(commits), med.latency()*1e3)
	p("## The median traced commit, step by step\n\n")
	p("Each step is a thread running from its wake-up to the wake-up it gives the next step (µs from the writer entering fdatasync). ")
	p("\"kernel\" marks a thread that slept in a system call until the kernel woke it (a device's completion, a kernel worker).\n\n")
	p("| step | process | thread | at µs | µs | woken by | system calls |\n|---:|---|---:|---:|---:|---|---|\n")
	for i, s := range med.steps {
		by := "–"
		if s.device {
			by = "kernel"
		} else if i > 0 {
			by = med.steps[i-1].role
		}
		p("| %d | %s | %d | %.0f | %.0f | %s | %s |\n", i+1, s.role, s.tid, (s.from-med.start)*1e6, (s.to-s.from)*1e6, by, strings.Join(s.calls, ", "))
	}
	writeTotals(&b, commits)
	return b.String()
}

// writeTotals sums every traced commit's path: wake-ups, and system calls
// by process.
func writeTotals(b *strings.Builder, commits []commit) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	var wakes []int
	calls := map[string]map[string]int{}
	steps := map[string]int{}
	for _, c := range commits {
		wakes = append(wakes, c.wakeups())
		for _, s := range c.steps {
			steps[s.role]++
			if calls[s.role] == nil {
				calls[s.role] = map[string]int{}
			}
			for _, name := range s.calls {
				calls[s.role][name]++
			}
		}
	}
	slices.Sort(wakes)
	p("\n## Every traced commit\n\n")
	p("Wake-ups in series per commit: median %d, least %d, most %d.\n\n", wakes[len(wakes)/2], wakes[0], wakes[len(wakes)-1])
	p("| process | steps per commit | system calls on the path per commit |\n|---|---:|---|\n")
	n := float64(len(commits))
	for _, role := range sortedKeys(steps) {
		var parts []string
		for _, name := range sortedKeys(calls[role]) {
			parts = append(parts, fmt.Sprintf("%s %.1f", name, float64(calls[role][name])/n))
		}
		p("| %s | %.1f | %s |\n", role, float64(steps[role])/n, strings.Join(parts, ", "))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func pct(s []time.Duration, q float64) time.Duration {
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
