package main

import "testing"

// The report's workload names and summary.json's keys name sizes alike.
func TestSizeNames(t *testing.T) {
	for _, c := range []struct {
		size      int
		name, key string
	}{{0, "empty", "empty"}, {100, "100 B write", "100b"}, {4096, "4 KiB write", "4k"}, {262144, "256 KiB write", "256k"}, {1 << 20, "1 MiB write", "1m"}} {
		if got := workload(c.size); got != c.name {
			t.Errorf("workload(%d) = %q, want %q", c.size, got, c.name)
		}
		if got := sizeKey(c.size); got != c.key {
			t.Errorf("sizeKey(%d) = %q, want %q", c.size, got, c.key)
		}
	}
}
