package main

import (
	"strings"
	"testing"
)

// TestPostEscapes: a post's text goes into the XML-RPC call escaped.
func TestPostEscapes(t *testing.T) {
	got := post("a <b> & c", "x")
	if !strings.Contains(got, "a &lt;b&gt; &amp; c") || strings.Contains(got, "<b>") {
		t.Fatalf("post struct not escaped: %s", got)
	}
	if v := between("<params><param><value><string>42</string>", "<string>", "</string>"); v != "42" {
		t.Fatalf("between: %q", v)
	}
}

// Rounds keep plain first and rotate the others; medians and spreads are
// the usual ones.
func TestRounds(t *testing.T) {
	sc := []string{"plain", "a", "b", "c"}
	for round, want := range map[int]string{1: "plain,a,b,c", 2: "plain,b,c,a", 3: "plain,c,a,b", 4: "plain,a,b,c"} {
		if got := strings.Join(roundOrder(sc, round), ","); got != want {
			t.Errorf("round %d: %s, want %s", round, got, want)
		}
	}
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3, 1, 2: %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 4, 1, 3, 2: %v", m)
	}
	if s := spread([]float64{0.9, 0.8, 0.95}, "%.2f"); s != "0.90 (0.80–0.95)" {
		t.Errorf("spread: %s", s)
	}
}
