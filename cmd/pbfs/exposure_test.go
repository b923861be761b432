package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/mountinfo"
)

// TestCopyExposesNoPrivilege: a setuid-root file and a world-writable
// device node written through the primary (whose FUSE mount is nosuid and
// nodev) reach the backup's copy, where they must not act either while the
// backup serves it: a local user who can reach the copy gains nothing. A
// backup that stops leaves no mount; one killed leaves its guard, which
// the next adopts.
func TestCopyExposesNoPrivilege(t *testing.T) {
	id, err := exec.LookPath("id")
	if err != nil {
		t.Skip("no id(1)")
	}
	c := fstest.NewClusterCopy(t, 1, nil, false)
	openUp(t, c.Dir, filepath.Dir(c.Dir)) // the copy is reachable by other users
	bin, err := os.ReadFile(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.Vol, "id"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(filepath.Join(c.Vol, "id"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(c.Vol, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	unix.Chmod(filepath.Join(c.Vol, "null"), 0o666)
	c.Barrier()
	// A rename closes the files the backup's applier keeps open for
	// writing (exec of one would fail with ETXTBSY); a create does not.
	if err := os.WriteFile(filepath.Join(c.Vol, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.Barrier()
	if err := os.Rename(filepath.Join(c.Vol, "x"), filepath.Join(c.Vol, "y")); err != nil {
		t.Fatal(err)
	}
	c.RequireConverged()
	b := c.Backups[0]
	if fi, err := os.Stat(filepath.Join(b.Vol, "id")); err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("the copy's id is not setuid (%v, %v): the test proves nothing", fi, err)
	}
	cmd := exec.Command(filepath.Join(b.Vol, "id"), "-u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run the copy's id as nobody: %v: %s", err, out)
	}
	if euid := strings.TrimSpace(string(out)); euid != "65534" {
		t.Errorf("a setuid-root file in the backup's copy ran as euid %s for nobody", euid)
	}
	if f, err := os.OpenFile(filepath.Join(b.Vol, "null"), os.O_WRONLY, 0); !errors.Is(err, unix.EACCES) {
		if f != nil {
			f.Close()
		}
		t.Errorf("opening the copy's device node: %v, want EACCES", err)
	}

	// Killed, the backup leaves its guard; the next adopts it.
	b.Cmd.Process.Signal(syscall.SIGKILL)
	b.Cmd.Wait()
	if n := mountsAt(t, b.Vol); n != 1 {
		t.Fatalf("%d mounts at the copy after kill -9, want its guard", n)
	}
	c.StartBackup(b)
	c.RequireConverged()
	if !strings.Contains(b.Out.String(), "adopted") {
		t.Errorf("the restarted backup did not adopt the guard:\n%s", b.Out)
	}
	if n := mountsAt(t, b.Vol); n != 1 {
		t.Errorf("%d mounts at the copy, want one guard", n)
	}
	// Stopped, it leaves none.
	b.Cmd.Process.Signal(syscall.SIGINT)
	if err := b.Cmd.Wait(); err != nil {
		t.Fatalf("backup exited: %v\n%s", err, b.Out)
	}
	if n := mountsAt(t, b.Vol); n != 0 {
		t.Errorf("%d mounts left at the copy after the backup stopped", n)
	}
}

func mountsAt(t *testing.T, dir string) int {
	t.Helper()
	tab, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range tab {
		if m.Point == dir {
			n++
		}
	}
	return n
}
