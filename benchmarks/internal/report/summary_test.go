package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMerge: two programs write their workloads into one summary; a
// second write of a workload replaces its scenarios and keeps the rest,
// and ratios are taken against plain.
func TestMerge(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(Merge(dir, "kv-insert", &Workload{Benchmark: "kv", Unit: "requests", Updated: now, Scenarios: map[string]*Scenario{
		"plain": {Throughput: 1000}, "pbfs-1": {Throughput: 500},
	}}))
	must(Merge(dir, "sysbench-oltp_insert", &Workload{Benchmark: "sysbench", Unit: "transactions", Updated: now, Scenarios: map[string]*Scenario{
		"plain": {Throughput: 3000},
	}}))
	must(Merge(dir, "kv-insert", &Workload{Benchmark: "kv", Unit: "requests", Updated: now, Scenarios: map[string]*Scenario{
		"pbfs-2": {Throughput: 250},
	}}))
	data, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	must(err)
	var s Summary
	must(json.Unmarshal(data, &s))
	kv := s.Workloads["kv-insert"]
	if kv == nil || len(kv.Scenarios) != 3 || s.Workloads["sysbench-oltp_insert"] == nil {
		t.Fatalf("summary lost a workload or scenario:\n%s", data)
	}
	if r := kv.Scenarios["pbfs-2"].RatioToPlain; r != 0.25 {
		t.Fatalf("pbfs-2 ratio to plain %v, want 0.25", r)
	}
	if r := kv.Scenarios["plain"].RatioToPlain; r != 1 {
		t.Fatalf("plain ratio %v, want 1", r)
	}
}

func TestLatencies(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	p50, p95, p99 := Latencies(lat)
	if p50 != 50 || p95 != 95 || p99 != 99 {
		t.Fatalf("p50 %v p95 %v p99 %v, want 50 95 99", p50, p95, p99)
	}
}

// TestCurves draws a chart and checks that a PNG came out.
func TestCurves(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.png")
	err := Curves(path, "t", "req/s", "p50 ms", []Series{
		{Name: "plain", Points: []Point{{30, 10}, {10, 5}, {20, 7}}},
		{Name: "pbfs-1", Points: []Point{{10, 8}, {20, 12}}},
		{Name: "other", Points: nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || len(data) < 1000 || string(data[1:4]) != "PNG" {
		t.Fatalf("no PNG at %s (%d bytes, %v)", path, len(data), err)
	}
}

func TestParseScenario(t *testing.T) {
	for name, want := range map[string]struct {
		n int
		d time.Duration
	}{"plain": {-1, 0}, "pbfs-0": {0, 0}, "pbfs-2": {2, 0}, "pbfs-1-delay": {1, LinkDelay}} {
		n, d, err := ParseScenario(name)
		if err != nil || n != want.n || d != want.d {
			t.Errorf("%s: %d %v %v, want %d %v", name, n, d, err, want.n, want.d)
		}
	}
	for _, bad := range []string{"pbfs", "pbfs-4", "pbfs-0-delay", "pbfs-1x", "semisync", "pbfs-1-delay-delay", ""} {
		if _, _, err := ParseScenario(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
