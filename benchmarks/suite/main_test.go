package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/report"
)

// TestIndex: the index tables every workload of summary.json, plain
// first, marks a client-bound plain's ratios as upper bounds, and links
// the reports and charts beside it.
func TestIndex(t *testing.T) {
	dir := t.TempDir()
	err := report.Merge(dir, "kv-read", &report.Workload{Benchmark: "kv", Unit: "requests", Updated: time.Now(), Scenarios: map[string]*report.Scenario{
		"pbfs-1": {Throughput: 200}, "plain": {Throughput: 1000, ClientBound: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kv-x.md", "kv-x-p50.png"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeIndex(dir, "bench-quick", time.Now(), []string{"kv (1s)"}, nil); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	got := string(data)
	plain := strings.Index(got, "| kv-read | plain (client-bound) |")
	pbfs := strings.Index(got, "| kv-read | pbfs-1 | 200.0 requests/s | ≤ 0.20 |")
	if plain < 0 || pbfs < 0 || plain > pbfs {
		t.Fatalf("summary table wrong:\n%s", got)
	}
	if !strings.Contains(got, "[kv-x.md](kv-x.md)") || !strings.Contains(got, "![kv-x-p50.png](kv-x-p50.png)") {
		t.Fatalf("reports or charts not linked:\n%s", got)
	}
}
