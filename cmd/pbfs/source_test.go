package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// requireFindmnt requires findmnt -S src to find the mount at target.
func requireFindmnt(t *testing.T, src, target string) {
	t.Helper()
	out, err := exec.Command("findmnt", "-n", "-o", "TARGET", "-S", src).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != target {
		t.Fatalf("findmnt -S %s: %v %q, want %s", src, err, out, target)
	}
}

// TestMountSourceIsTheBackingDirectory: the mount table names a pbfs
// mount's backing directory as its source, so tools that find a mount by
// its source (findmnt -S, fstab, xfstests) find it; it used to say "pbfs".
func TestMountSourceIsTheBackingDirectory(t *testing.T) {
	vol, _, jdir := layout(t)
	p := startMount(t, nil, vol, jdir)
	requireFindmnt(t, vol, vol)
	p.Stop()
	dir := t.TempDir()
	src, mnt := filepath.Join(dir, "src with a space"), filepath.Join(dir, "mnt")
	must(t, os.Mkdir(src, 0o755))
	must(t, os.Mkdir(mnt, 0o755))
	startMount(t, nil, mnt, filepath.Join(dir, "j"), "--backing", src)
	requireFindmnt(t, src, mnt)
}
