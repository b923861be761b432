package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestParseRun reads sysbench 1.0.20's output of a run with
// --report-interval, --percentile=99 and --histogram=on.
func TestParseRun(t *testing.T) {
	out := `Threads started!

[ 5s ] thds: 4 tps: 1312.27 qps: 7877.22 (r/w/o: 0.00/5251.68/2625.54) lat (ms,99%): 13.46 err/s: 0.20 reconn/s: 0.00
[ 10s ] thds: 4 tps: 1344.06 qps: 8064.54 (r/w/o: 0.00/5376.43/2688.11) lat (ms,99%): 12.08 err/s: 0.00 reconn/s: 0.00
Latency histogram (values are in milliseconds)
       value  ------------- distribution ------------- count
       1.000 |**********                               50
       2.000 |****************************************  45
       10.00 |*                                         4
      80.000 |                                         1
 
SQL statistics:
    transactions:                        100  (10.00 per sec.)
    ignored errors:                      1      (0.10 per sec.)

Latency (ms):
         min:                                    0.46
         max:                                   83.01
         99th percentile:                       12.98
`
	r, err := parseRun(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.txns != 100 || r.tps != 10 || r.errPerSec != 0.1 || r.p99Reported != 12.98 || r.maxLat != 83.01 {
		t.Errorf("summary: %+v", r)
	}
	if r.p50 != 1 || r.p95 != 2 || r.p99 != 10 {
		t.Errorf("percentiles p50 %v p95 %v p99 %v, want 1, 2, 10", r.p50, r.p95, r.p99)
	}
	if len(r.intervalTPS) != 2 || r.intervalTPS[1] != 1344.06 {
		t.Errorf("intervals %v", r.intervalTPS)
	}
}

// TestCompareBackups: a backup equal to the primary but for the
// local-only files passes; a changed, missing or extra file fails.
func TestCompareBackups(t *testing.T) {
	dir := t.TempDir()
	vol, bvol := filepath.Join(dir, "vol"), filepath.Join(dir, "b0")
	write := func(root, name, data string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, root := range []string{vol, bvol} {
		write(root, "ibdata1", "pages")
		write(root, "sbtest/sbtest1.ibd", "rows")
	}
	write(vol, "ibtmp1", "temporary")
	write(vol, "ib_buffer_pool", "dump")
	c := &cluster{name: "t", vol: vol, bvols: []string{bvol}}
	files, bytes, err := c.compareBackups()
	if err != nil || files != 2 || bytes != 9 {
		t.Fatalf("equal copies: %d files, %d bytes, %v", files, bytes, err)
	}
	write(bvol, "sbtest/sbtest1.ibd", "rowz")
	write(bvol, "extra", "x")
	os.Remove(filepath.Join(bvol, "ibdata1"))
	_, _, err = c.compareBackups()
	if err == nil {
		t.Fatal("differing copies compared equal")
	}
	for _, want := range []string{"sbtest/sbtest1.ibd differs", "ibdata1 missing", "extra only on the backup"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestNum: thousands separators above 100, one decimal below.
func TestNum(t *testing.T) {
	for v, want := range map[float64]string{2828.4: "2,828", 1234567: "1,234,567", 99.94: "99.9", 182: "182"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %s, want %s", v, got, want)
		}
	}
}

// TestScenarioNames checks that -scenarios accepts every scenario the
// program can set up, and only those.
func TestScenarioNames(t *testing.T) {
	for _, s := range allScenarios {
		if _, ok := pbfsScenarios[s]; !ok && s != "plain" && s != "semisync" {
			t.Errorf("-scenarios accepts %q, which no code sets up", s)
		}
	}
	for s := range pbfsScenarios {
		if !slices.Contains(allScenarios, s) {
			t.Errorf("pbfs scenario %q is missing from allScenarios", s)
		}
	}
	for _, s := range defaultScenarios {
		if !slices.Contains(allScenarios, s) {
			t.Errorf("default scenario %q is missing from allScenarios", s)
		}
	}
}
