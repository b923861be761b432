package apply

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/mountinfo"
)

// exposedCopy makes a directory other users can reach, holding a
// setuid-root copy of id(1) and a world-writable device node (/dev/null's),
// as a hostile or careless primary could send.
func exposedCopy(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes setuid-root files and device nodes")
	}
	id, err := exec.LookPath("id")
	if err != nil {
		t.Skip("no id(1)")
	}
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755) // t.TempDir's own is 0700
	bin, err := os.ReadFile(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "id"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(filepath.Join(dir, "id"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	unix.Chmod(filepath.Join(dir, "null"), 0o666)
	t.Cleanup(func() { unmountAll(dir) })
	return dir
}

// euidOfNobody runs the copy's setuid id(1) as nobody and returns the
// effective uid it reports.
func euidOfNobody(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "id"), "-u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run the copy's id as nobody: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func deviceOpens(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "null"), os.O_WRONLY, 0)
	if err == nil {
		_, err = io.WriteString(f, "x")
		f.Close()
	}
	return err
}

// TestCopyGuard: while guarded, a setuid-root file in a copy runs with the
// caller's uid, and a device node there does not open; released, the copy
// is a plain directory again.
func TestCopyGuard(t *testing.T) {
	dir := exposedCopy(t)
	if got := euidOfNobody(t, dir); got != "0" {
		t.Fatalf("unguarded, the setuid-root id reports euid %s: the test cannot tell a guard from none", got)
	}
	if err := deviceOpens(dir); err != nil {
		t.Fatalf("unguarded, the device node does not open: %v", err)
	}
	g, err := GuardCopy(dir)
	if err != nil {
		t.Fatal(err)
	}
	if g.How != "mounted" {
		t.Fatalf("guard %q, want mounted", g.How)
	}
	if got := euidOfNobody(t, dir); got != "65534" {
		t.Errorf("guarded, a setuid-root file in the copy ran as euid %s for nobody", got)
	}
	if err := deviceOpens(dir); !errors.Is(err, unix.EACCES) {
		t.Errorf("guarded, opening the copy's device node: %v, want EACCES", err)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	if n := mountsAt(t, dir); n != 0 {
		t.Errorf("%d mounts left at the copy after Release", n)
	}
}

// TestCopyGuardAdopted: a guard a killed backup left is adopted by the
// next, not stacked, and released by it.
func TestCopyGuardAdopted(t *testing.T) {
	dir := exposedCopy(t)
	if _, err := GuardCopy(dir); err != nil { // never released: the backup was killed
		t.Fatal(err)
	}
	g, err := GuardCopy(dir)
	if err != nil {
		t.Fatal(err)
	}
	if g.How != "adopted" {
		t.Errorf("guard %q, want adopted", g.How)
	}
	if n := mountsAt(t, dir); n != 1 {
		t.Errorf("%d mounts at the copy, want the one guard", n)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	if n := mountsAt(t, dir); n != 0 {
		t.Errorf("%d mounts left at the copy after Release", n)
	}
}

// TestCopyGuardNotNeeded: a copy on a file system mounted nosuid,nodev
// gets no mount of its own, and Release leaves that file system alone.
func TestCopyGuardNotNeeded(t *testing.T) {
	dir := exposedCopy(t)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	g, err := GuardCopy(dir)
	if err != nil {
		t.Fatal(err)
	}
	if g.How != "not needed" {
		t.Errorf("guard %q, want not needed", g.How)
	}
	g.Release()
	if n := mountsAt(t, dir); n != 1 {
		t.Errorf("%d mounts at the copy, want the tmpfs alone", n)
	}
}

func mountsAt(t *testing.T, dir string) int {
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

func unmountAll(dir string) {
	for i := 0; i < 8 && unix.Unmount(dir, unix.MNT_DETACH) == nil; i++ {
	}
}
