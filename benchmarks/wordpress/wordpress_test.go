package main

import (
	"strings"
	"testing"
)

func TestScenarioNames(t *testing.T) {
	for _, bad := range []string{"pbfs", "pbfs-4", "semisync"} {
		if _, err := backupsOf(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if n, err := backupsOf("pbfs-2"); err != nil || n != 2 {
		t.Errorf("pbfs-2: %d, %v", n, err)
	}
}

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
