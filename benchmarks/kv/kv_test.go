package main

import (
	"bytes"
	"testing"
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
