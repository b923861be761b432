package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
)

// TestHelperOptions: mount options become pbfs mount's flags; what
// mount(8), fstab and systemd add is ignored; what pbfs cannot honour, and
// what it does not know, is refused with the reason.
func TestHelperOptions(t *testing.T) {
	dir := t.TempDir()
	src, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "mnt")
	must(t, os.Mkdir(src, 0o755))
	must(t, os.Mkdir(mnt, 0o755))
	for _, tc := range []struct {
		args     []string
		want     string // the daemon's arguments, or
		refusal  string // the start of the error
		logFile  string
		sloppily bool
	}{
		{args: []string{src, mnt, "-o", "rw,journal=/j,backup=a:1,backup=b:2,token_file=/t,allow_other,noatime,_netdev,nofail,x-systemd.requires=x,comment=y,log_level=debug,dev,suid,log=/l", "-t", "fuse.pbfs"},
			want: "--log-level=debug mount --journal=/j --backup=a:1 --backup=b:2 --token-file=/t --allow-other --backing " + src + " " + mnt, logFile: "/l"},
		{args: []string{mnt, mnt + "/", "-n", "-o", "defaults,journal=/j,config=/etc/pbfs/pbfs.yaml"}, want: "--config=/etc/pbfs/pbfs.yaml mount --journal=/j " + mnt + "/"},
		{args: []string{src, mnt, "-o", "journal=/j,bogus=1"}, refusal: `unknown option "bogus"`},
		{args: []string{src, mnt, "-s", "-o", "journal=/j,bogus=1"}, want: "mount --journal=/j --backing " + src + " " + mnt, sloppily: true},
		{args: []string{src, mnt, "-o", "journal=/j,token=secret"}, refusal: "option token: /etc/fstab is world-readable"},
		{args: []string{src, mnt, "-o", "ro,journal=/j"}, refusal: "option ro: a pbfs mount is read-write"},
		{args: []string{src, mnt, "-o", "journal"}, refusal: "option journal needs a value"},
		{args: []string{src, mnt, "-N", "1234"}, refusal: "-N (another mount namespace) is not supported"},
		{args: []string{src}, refusal: "want SRC MNT"},
	} {
		h, err := parseHelper(tc.args)
		var got []string
		var logFile string
		warned := false
		if err == nil {
			got, logFile, err = h.daemonArgs(newApp(), func(string) { warned = true })
		}
		switch {
		case tc.refusal != "":
			if err == nil || !strings.HasPrefix(err.Error(), tc.refusal) {
				t.Errorf("%v: %v, want %q", tc.args, err, tc.refusal)
			}
		case err != nil || strings.Join(got, " ") != tc.want || logFile != tc.logFile || warned != tc.sloppily:
			t.Errorf("%v: %q (log %q, warned %v) %v; want %q", tc.args, got, logFile, warned, err, tc.want)
		}
	}
	if got := defaultLog("/srv/pbfs/mysql"); got != "/var/log/pbfs/srv-pbfs-mysql.log" {
		t.Errorf("default log: %s", got)
	}
}

// helperSetup links a mount helper of a type of the test's own to the
// pbfs under test (a pbfs make install put in /sbin stays untouched), and
// makes the test process the reaper of the daemons the helper leaves
// behind, so their exit status can be checked. It returns the type.
func helperSetup(t *testing.T) string {
	t.Helper()
	fstest.RequireFUSE(t)
	typ := fmt.Sprintf("fuse.pbfs-test%d", os.Getpid())
	link := "/sbin/mount." + typ
	os.Remove(link)
	must(t, os.Symlink(pbfsBin, link))
	t.Cleanup(func() { os.Remove(link) })
	must(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	return typ
}

// mountCmd runs mount(8) or umount(8) and returns its output and status.
func mountCmd(t *testing.T, name string, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// daemonPid reads the daemon's pid from the helper's -v line.
func daemonPid(t *testing.T, out string) int {
	t.Helper()
	var pid int
	if i := strings.Index(out, "(pid "); i < 0 {
		t.Fatalf("no pid in the helper's words: %q", out)
	} else {
		fmt.Sscan(out[i+5:], &pid)
	}
	return pid
}

// reap waits for the daemon pid (the test's, as reaper) to exit, and
// returns its exit status.
func reap(t *testing.T, pid int, log string) int {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
			done <- -1
			return
		}
		done <- ws.ExitStatus()
	}()
	select {
	case code := <-done:
		return code
	case <-time.After(30 * time.Second):
		unix.Kill(pid, unix.SIGKILL)
		data, _ := os.ReadFile(log)
		t.Fatalf("the daemon %d did not exit after umount:\n%s", pid, data)
		return -1
	}
}
