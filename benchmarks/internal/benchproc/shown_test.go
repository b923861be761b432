package benchproc

import (
	"os"
	"path/filepath"
	"testing"
)

// TestShownArgs: a report's command line names files under the working
// directory relative to it and others by base name only.
func TestShownArgs(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	got := ShownArgs([]string{"-bin", filepath.Join(wd, "bin/pbfs"), "-out=/elsewhere/dir/r.md", "-sizes", "4096,8192", "a b", ""})
	want := `-bin bin/pbfs -out=r.md -sizes 4096,8192 "a b" ""`
	if got != want {
		t.Fatalf("ShownArgs = %s, want %s", got, want)
	}
}
