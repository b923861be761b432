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
