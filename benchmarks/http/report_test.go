package main

import (
	"testing"
	"time"
)

// TestPointAndGoodput: summary.json takes latencies at the rate nearest
// 70 % of plain's peak, and an overloaded target's late answers do not
// count as if they came within the offered duration.
func TestPointAndGoodput(t *testing.T) {
	all := []result{{rate: 500, fraction: 0.5}, {rate: 720, fraction: 0.72}, {rate: 900, fraction: 0.9}}
	if at := pointAt(all); at != 720 {
		t.Fatalf("point at %v, want 720", at)
	}
	fixed := []result{{rate: 100}, {rate: 200}, {rate: 400, status5: 3}}
	if at := pointAt(fixed); at != 200 {
		t.Fatalf("point of a -rates sweep at %v, want 200 (the highest without errors)", at)
	}
	r := result{ok: 1000, duration: 2 * time.Second, elapsed: 4 * time.Second}
	if g := r.goodput(); g != 250 {
		t.Fatalf("goodput %v, want 250 (1000 answers over the 4 s they took)", g)
	}
}

func TestParseScenario(t *testing.T) {
	for name, want := range map[string]scenario{
		"plain":           {backups: -1},
		"pbfs-1":          {backups: 1, proxy: true},
		"pbfs-1-no-proxy": {backups: 1},
		"pbfs-2-deferred": {backups: 2, proxy: true, deferred: true},
		"pbfs-2-delay":    {backups: 2, delay: 500 * time.Microsecond, proxy: true},
	} {
		if got, err := parseScenario(name); err != nil || got != want {
			t.Errorf("%s: %+v, %v; want %+v", name, got, err, want)
		}
	}
	for _, bad := range []string{"plain-no-proxy", "plain-deferred", "pbfs-1-no-proxy-deferred", "pbfs-x"} {
		if _, err := parseScenario(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
