package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A user who cannot open /dev/fuse is told so, and what to do, before
// pbfs creates anything: no journal is left behind.
func TestMountWithoutFUSEAccess(t *testing.T) {
	if fi, err := os.Stat("/dev/fuse"); err != nil || fi.Mode().Perm()&0o006 != 0 {
		t.Skip("every user may open /dev/fuse here")
	}
	dir, err := os.MkdirTemp("", "pbfs-nofuse-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o777))
	bin := filepath.Join(dir, "pbfs")
	data, err := os.ReadFile(pbfsBin)
	must(t, err)
	must(t, os.WriteFile(bin, data, 0o755))
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	must(t, os.Mkdir(vol, 0o777))
	cmd := exec.Command(bin, "mount", "--journal", jdir, vol)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "cannot use FUSE: /dev/fuse: permission denied: run pbfs as root") {
		t.Fatalf("mount as a user without /dev/fuse: %v:\n%s", err, out)
	}
	if _, err := os.Stat(jdir); !os.IsNotExist(err) {
		t.Fatalf("a refused mount left its journal directory: %v", err)
	}
}
