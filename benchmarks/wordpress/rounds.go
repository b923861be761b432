package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
)

// Rounds: with -rounds N every scenario runs N times, plain first in each
// round (the open-loop rates are fractions of that round's plain peak) and
// the others rotated by one place per round, so that no scenario always
// runs right after plain or last. The report leads with each scenario's
// medians: of its peak, of its ratio to the same round's plain, and of its
// CPU per request.

// roundOrder is the scenarios' order in round (1-based): plain, then the
// others rotated by round-1.
func roundOrder(scenarios []string, round int) []string {
	rest := slices.Clone(scenarios[1:])
	if len(rest) > 0 {
		k := (round - 1) % len(rest)
		rest = append(rest[k:], rest[:k]...)
	}
	return append([]string{scenarios[0]}, rest...)
}

// median of xs (0 if none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// plainOf is the plain run of r's round.
func (rep *wpReport) plainOf(r *scenarioRun) *scenarioRun {
	for _, p := range rep.runs {
		if p.name == "plain" && p.round == r.round {
			return p
		}
	}
	return nil
}

// label names a run in the per-run tables: its scenario, and its round
// when there are several.
func (rep *wpReport) label(r *scenarioRun) string {
	if rep.cfg.rounds > 1 {
		return fmt.Sprintf("%s (round %d)", r.name, r.round)
	}
	return r.name
}

// cpuMs is CPU per request in ms.
func cpuMs(c benchproc.CPU, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(c.Total()) / float64(n) / 1e6
}

// medianRun is the run of scenario name whose peak is the median one (the
// lower of the two middle ones for an even count).
func (rep *wpReport) medianRun(name string) *scenarioRun {
	var runs []*scenarioRun
	for _, r := range rep.runs {
		if r.name == name {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return nil
	}
	slices.SortFunc(runs, func(a, b *scenarioRun) int { return int(a.peak.rate*1000 - b.peak.rate*1000) })
	return runs[(len(runs)-1)/2]
}

// medians is the report's lead table with -rounds above 1.
func (rep *wpReport) medians() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("## Medians over %d rounds\n\nEach scenario's median, its lowest and highest in brackets; a ratio is to the same round's plain peak.\n\n", rep.cfg.rounds)
	p("| scenario | editPost/s | ratio to plain | CPU ms/request: pbfs mount + proxy | backups or replicas |\n|---|---:|---:|---:|---:|\n")
	for _, name := range rep.cfg.scenarios {
		var rate, ratio, mount, backups []float64
		for _, r := range rep.runs {
			if r.name != name {
				continue
			}
			rate = append(rate, r.peak.rate)
			if pl := rep.plainOf(r); pl != nil && pl.peak.rate > 0 {
				ratio = append(ratio, r.peak.rate/pl.peak.rate)
			}
			mount = append(mount, cpuMs(r.peak.cpuMount, r.peak.ok))
			backups = append(backups, cpuMs(r.peak.cpuBackup, r.peak.ok))
		}
		p("| %s | %s | %s | %s | %s |\n", name, spread(rate, "%.1f"), spread(ratio, "%.2f"), spread(mount, "%.2f"), spread(backups, "%.2f"))
	}
	return b.String() + "\n"
}

// spread is "median (lowest–highest)".
func spread(xs []float64, format string) string {
	if len(xs) == 0 {
		return "–"
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	return fmt.Sprintf(format+" ("+format+"–"+format+")", median(xs), lo, hi)
}
