package fs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// Permission checks: with --allow-other the kernel checks every access
// (default_permissions); without it only the mounting user gets in and
// pbfs answers as the backing file system answers that user. Either way a
// caller must see what it would see on a plain directory.

// permSeed builds the same small tree of owners and modes twice: in the
// volume before mounting and in a plain directory to compare with.
func permSeed(t *testing.T, dir string) {
	t.Helper()
	must(t, os.Chmod(dir, 0o755))
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"locked", 0o755}, {"open", 0o777}, {"sealed", 0o000}} {
		must(t, os.Mkdir(filepath.Join(dir, d.path), d.mode))
		must(t, os.Chmod(filepath.Join(dir, d.path), d.mode))
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
		uid  int
	}{
		{"locked/ro", 0o644, 0}, {"locked/secret", 0o600, 0}, {"pub", 0o666, 0},
		{"readonly", 0o444, 0}, {"noperm", 0o000, 0},
		{"script", 0o644, 0}, {"prog", 0o755, 0}, {"open/mine", 0o600, 1000},
	} {
		p := filepath.Join(dir, f.path)
		must(t, os.WriteFile(p, []byte("#!/bin/sh\necho ran\n"), f.mode))
		must(t, os.Chmod(p, f.mode))
		must(t, os.Chown(p, f.uid, f.uid))
	}
}

// permChecks are shell commands whose outcome depends on permissions.
var permChecks = []string{
	"cat locked/ro", "cat locked/secret", "echo y >> locked/ro", "echo y > locked/new",
	"rm -f locked/ro", "mv locked/ro locked/ro2", "echo y >> pub", "echo y >> readonly",
	"cat noperm", "ls sealed", "cd sealed", "touch sealed/x", "./script", "./prog",
	"test -x script", "test -x prog", "test -w readonly", "test -r noperm", "test -x locked",
	"echo y >> open/mine", "chmod 600 pub", "chmod 600 open/mine", "touch -d 2001-01-01 pub",
}

// outcomes runs every check in dir as uid (and its gid) and reports which
// ones succeeded.
func outcomes(t *testing.T, dir string, uid uint32) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for _, c := range permChecks {
		cmd := exec.Command("/bin/sh", "-c", c)
		cmd.Dir = dir
		if uid != 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		}
		got[c] = cmd.Run() == nil
	}
	return got
}

func checkSame(t *testing.T, who string, plain, pbfs map[string]bool) (denied int) {
	t.Helper()
	for _, c := range permChecks {
		if plain[c] != pbfs[c] {
			t.Errorf("%s: %q succeeded=%v on pbfs, %v on a plain directory", who, c, pbfs[c], plain[c])
		}
		if !plain[c] {
			denied++
		}
	}
	return denied
}

// openParents lets another uid walk down to dir (t.TempDir's are 0700).
func openParents(t *testing.T, dir string) {
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		must(t, os.Chmod(d, 0o755))
	}
}

// asUser1000 makes cmd run as uid and gid 1000, with no supplementary
// groups.
func asUser1000(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{}}}
}

// mountOptions returns the mount options /proc/mounts shows for dir.
func mountOptions(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/mounts")
	must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[1] == dir {
			return f[3]
		}
	}
	t.Fatalf("%s is not mounted", dir)
	return ""
}

// TestPermissionsWithAllowOther: another user gets exactly the access a
// plain directory gives it, denials included, and a denied write changes
// nothing on the primary or in the journal.
func TestPermissionsWithAllowOther(t *testing.T) {
	e := fstest.Setup(t, mount.Config{AllowOther: true}, func(vol string) { permSeed(t, vol) })
	plain := filepath.Join(e.Dir, "plain")
	must(t, os.Mkdir(plain, 0o755))
	permSeed(t, plain)
	openParents(t, e.Vol)
	if o := mountOptions(t, e.Vol); !strings.Contains(o, "default_permissions") {
		t.Fatalf("--allow-other mount without default_permissions: %s", o)
	}
	if denied := checkSame(t, "uid 1000", outcomes(t, plain, 1000), outcomes(t, e.Vol, 1000)); denied < 10 {
		t.Fatalf("only %d checks denied to uid 1000 on a plain directory: the test checks too little", denied)
	}
	b, err := os.ReadFile(filepath.Join(e.Vol, "locked", "ro"))
	must(t, err)
	if string(b) != "#!/bin/sh\necho ran\n" {
		t.Fatalf("locked/ro changed by a denied write: %q", b)
	}
	e.CheckReplay()
}

// TestOnlyTheMounterWithoutAllowOther: without --allow-other the kernel
// turns every other user away, and root gets what root gets on a plain
// directory, without default_permissions' extra round trips.
func TestOnlyTheMounterWithoutAllowOther(t *testing.T) {
	e := fstest.Setup(t, mount.Config{}, func(vol string) { permSeed(t, vol) })
	plain := filepath.Join(e.Dir, "plain")
	must(t, os.Mkdir(plain, 0o755))
	permSeed(t, plain)
	openParents(t, e.Vol)
	if o := mountOptions(t, e.Vol); strings.Contains(o, "default_permissions") || strings.Contains(o, "allow_other") {
		t.Fatalf("mount options %s", o)
	}
	for _, dir := range []string{plain, e.Vol} {
		cmd := exec.Command("/bin/sh", "-c", "ls \"$0\" && cat \"$0/pub\"", dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
		out, err := cmd.CombinedOutput()
		if dir == plain && err != nil {
			t.Fatalf("uid 1000 cannot read the plain directory: %v\n%s", err, out)
		}
		if dir == e.Vol && (err == nil || !strings.Contains(string(out), "ermission denied")) {
			t.Fatalf("uid 1000 on a mount without --allow-other: %v\n%s", err, out)
		}
	}
	if denied := checkSame(t, "root", outcomes(t, plain, 0), outcomes(t, e.Vol, 0)); denied < 2 {
		t.Fatalf("only %d checks denied to root on a plain directory: the test checks too little", denied)
	}
	e.CheckReplay()
}
