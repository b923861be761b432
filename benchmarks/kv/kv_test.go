package main

import (
	"bytes"
	"testing"
	"time"
)

// TestValues: a value has the asked size and tells its key and
// generation apart, so a read pass catches a stale or misplaced value.
func TestValues(t *testing.T) {
	a, b, c := value(7, 1, 1024), value(7, 2, 1024), value(8, 1, 1024)
	if len(a) != 1024 || bytes.Equal(a, b) || bytes.Equal(a, c) {
		t.Fatalf("values do not tell key and generation apart: %q %q %q", a[:32], b[:32], c[:32])
	}
	if !bytes.Equal(a, value(7, 1, 1024)) {
		t.Fatal("value is not deterministic")
	}
}

// TestScenarioNames: each scenario name gives the mount it asks for, and
// names that ask for nothing runnable are refused.
func TestScenarioNames(t *testing.T) {
	for name, want := range map[string]shape{
		"bindfs":          {backups: -1},
		"plain":           {backups: -1},
		"pbfs-0":          {backups: 0},
		"pbfs-2-delay":    {backups: 2, delay: 500 * time.Microsecond},
		"pbfs-1-deferred": {backups: 1, deferred: true},
	} {
		if name != bindfsScenario {
			if err := checkScenario(name); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		if got := shapeOf(name); got != want {
			t.Errorf("%s: shape %+v, want %+v", name, got, want)
		}
	}
	for _, bad := range []string{"plain-deferred", "pbfs-x", "pbfs-1-deferred-delay", "pbfs-0-delay"} {
		if err := checkScenario(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
