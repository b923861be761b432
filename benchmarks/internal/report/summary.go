// Package report holds what every benchmark program writes besides its
// own Markdown: results/summary.json, one document for all of them, with
// stable key names (docs/PERFORMANCE.md, "summary.json"), and the latency
// summary they all compute the same way.
package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// SummaryFile is the name of the shared summary in a results directory.
const SummaryFile = "summary.json"

// BaselineScenario is the scenario every ratio is taken against: the
// same workload on a plain directory, no pbfs.
const BaselineScenario = "plain"

// Summary is results/summary.json.
type Summary struct {
	// Workloads by name (for example "kv-insert", "sysbench-oltp_write_only").
	Workloads map[string]*Workload `json:"workloads"`
}

// Workload is one workload's results, by scenario name ("plain",
// "pbfs-0", "pbfs-1", "pbfs-2", "pbfs-2-delay", "semisync", ...).
type Workload struct {
	Benchmark string               `json:"benchmark"` // the program that measured it (benchmarks/<name>)
	Unit      string               `json:"unit"`      // what throughput counts, per second ("requests", "transactions")
	Updated   time.Time            `json:"updated"`   // when the program wrote this workload
	Scenarios map[string]*Scenario `json:"scenarios"`
}

// Scenario is one workload under one scenario.
type Scenario struct {
	Throughput float64 `json:"throughput"` // successful operations per second
	P50Ms      float64 `json:"p50_ms"`
	P95Ms      float64 `json:"p95_ms"`
	P99Ms      float64 `json:"p99_ms"`
	Errors     int64   `json:"errors"` // failed operations (for the KV stress: non-2xx and transport errors)
	// RatioToPlain is Throughput divided by the plain scenario's, 0
	// when there is no plain scenario (1 for plain itself).
	RatioToPlain float64 `json:"ratio_to_plain"`
	// ClientBound: the load generator used more than its share of the
	// machine (benchproc.MaxClientCPU), so this throughput may be the
	// generator's limit. On plain it makes every ratio an upper bound.
	ClientBound bool `json:"client_bound,omitempty"`
}

// Latencies summarizes a set of latencies as a Scenario's percentiles.
// It sorts lat.
func Latencies(lat []time.Duration) (p50, p95, p99 float64) {
	slices.Sort(lat)
	return Pct(lat, 0.50), Pct(lat, 0.95), Pct(lat, 0.99)
}

// Pct is the nearest-rank percentile of sorted latencies, in ms.
func Pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return float64(sorted[max(0, min(i, len(sorted)-1))]) / 1e6
}

// Merge writes w's scenarios into dir's summary.json under name, keeping
// every other workload (and this workload's other scenarios) as they
// were, and recomputes the workload's ratios to plain.
func Merge(dir, name string, w *Workload) error {
	path := filepath.Join(dir, SummaryFile)
	s := &Summary{}
	if data, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(data, s); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	} else if !os.IsNotExist(err) {
		return err
	}
	if s.Workloads == nil {
		s.Workloads = map[string]*Workload{}
	}
	old := s.Workloads[name]
	if old != nil && old.Benchmark == w.Benchmark {
		for k, v := range w.Scenarios {
			old.Scenarios[k] = v
		}
		old.Updated, old.Unit = w.Updated, w.Unit
		w = old
	}
	if base := w.Scenarios[BaselineScenario]; base != nil && base.Throughput > 0 {
		for _, sc := range w.Scenarios {
			sc.RatioToPlain = sc.Throughput / base.Throughput
		}
	}
	s.Workloads[name] = w
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// LinkDelay is the one-way delay a "-delay" scenario adds between the
// primary and each backup (through benchmarks/internal/delayproxy).
const LinkDelay = 500 * time.Microsecond

// ParseScenario reads a scenario name of the storage benchmarks: "plain"
// (backups -1), "pbfs-N" for N backups from 0 to 3, and "pbfs-N-delay"
// with LinkDelay added each way on every backup's link.
func ParseScenario(name string) (backups int, delay time.Duration, err error) {
	if name == BaselineScenario {
		return -1, 0, nil
	}
	base, delayed := strings.CutSuffix(name, "-delay")
	var n int
	if _, err := fmt.Sscanf(base, "pbfs-%d", &n); err != nil || n < 0 || n > 3 || base != fmt.Sprintf("pbfs-%d", n) || (delayed && n == 0) {
		return 0, 0, fmt.Errorf("scenario %q: want plain, pbfs-N or pbfs-N-delay (N backups, 0 to 3; -delay needs a backup)", name)
	}
	if delayed {
		delay = LinkDelay
	}
	return n, delay, nil
}

// Publish prints a benchmark's report and, unless dir is empty, writes
// it with its charts (drawn by charts into dir, named after stem) as
// dir/<name>-<start>.md. A run whose checks failed is written, with its
// FAILED banner, and then returned as an error, so the caller merges into
// summary.json only on success with a dir.
func Publish(dir, name string, start time.Time, md string, charts func(dir, stem string) (string, error), failed []string) error {
	fmt.Print("\n" + md)
	if dir != "" {
		stem := name + "-" + start.UTC().Format("2006-01-02-150405")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		ch, err := charts(dir, stem)
		if err != nil {
			return err
		}
		path := filepath.Join(dir, stem+".md")
		if err := os.WriteFile(path, []byte(md+ch), 0o644); err != nil {
			return err
		}
		fmt.Println("report:", path)
	}
	if len(failed) > 0 {
		return fmt.Errorf("checks failed: %s", strings.Join(failed, "; "))
	}
	return nil
}
