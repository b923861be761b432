package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/timerslack"
)

// slacks returns the timer slack of every thread of process pid.
func slacks(t *testing.T, pid int) map[string]time.Duration {
	t.Helper()
	tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Duration{}
	for _, tid := range tids {
		n, _ := strconv.Atoi(tid.Name())
		if d, err := timerslack.Of(n); err == nil {
			out[tid.Name()] = d
		} // else it exited
	}
	return out
}

// replicateWith restarts backup b with args added to its own, then
// writes 50 files with a barrier after each and requires every backup to
// hold the same tree as the primary.
func replicateWith(t *testing.T, c *fstest.Cluster, b *fstest.BackupProc, args ...string) {
	t.Helper()
	b.Args = append(b.Args, args...)
	stopBackup(b)
	c.StartBackup(b)
	for i := range 50 {
		must(t, os.WriteFile(filepath.Join(c.Vol, fmt.Sprint("f", i)), bytes.Repeat([]byte{byte(i)}, 9000), 0o644))
		c.Barrier()
	}
	c.WaitApplied(c.Barrier())
	c.RequireConverged()
}

// TestBackupScheduling: a backup runs every thread, those it started
// while replicating included, with --timer-slack (1 ms unless told), and
// its Go code on --procs threads (1 unless told), and replicates as
// before; --timer-slack 0 leaves the kernel's default and --procs 0 Go's;
// the primary keeps the defaults but on its Go runtime's monitor thread.
func TestBackupScheduling(t *testing.T) {
	if err := timerslack.Set(0); err != nil {
		t.Skipf("this test process cannot set timer slacks: %v", err)
	}
	c := fstest.NewCluster(t, 2, nil)
	replicateWith(t, c, c.Backups[1], "--timer-slack", "0", "--procs", "0")
	for i, want := range []time.Duration{time.Millisecond, timerslack.Default} {
		got := slacks(t, c.Backups[i].Cmd.Process.Pid)
		for tid, d := range got {
			if d != want {
				t.Errorf("backup %d thread %s: slack %v, want %v", i, tid, d, want)
			}
		}
		if len(got) < 3 {
			t.Errorf("backup %d: only %d threads seen", i, len(got))
		}
	}
	if os.Getenv("GOMAXPROCS") == "" { // else the backups keep it
		for i, want := range []string{`procs=1 timer_slack=1ms`, fmt.Sprintf("procs=%d timer_slack=0s", runtime.GOMAXPROCS(0))} {
			if out := c.Backups[i].Out.String(); !strings.Contains(out, `msg="scheduled as a backup" `+want) {
				t.Errorf("backup %d did not log %q:\n%s", i, want, out)
			}
		}
	}
	primaryKeepsTheDefault(t, c.Primary)
}

// primaryKeepsTheDefault: every thread of the primary but its Go runtime's
// monitor, which it logged, has the kernel's default slack, the monitor
// --monitor-slack's default. A thread the monitor started inherits its
// slack until the mount's next check puts it back (within a second).
func primaryKeepsTheDefault(t *testing.T, p *fstest.Proc) {
	t.Helper()
	var monitor string
	for deadline := time.Now().Add(10 * time.Second); monitor == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the primary logged no monitor thread:\n%s", p.Out.String())
		}
		if _, after, ok := strings.Cut(p.Out.String(), `msg="timer slack set on the Go runtime's monitor thread" tid=`); ok {
			monitor, _, _ = strings.Cut(after, " ")
		}
	}
	var wrong []string
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		wrong = wrong[:0]
		for tid, d := range slacks(t, p.Cmd.Process.Pid) {
			want := timerslack.Default
			if tid == monitor {
				want = time.Millisecond
			}
			if d != want {
				wrong = append(wrong, fmt.Sprintf("thread %s: slack %v, want %v", tid, d, want))
			}
		}
		if len(wrong) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, w := range wrong {
		t.Errorf("primary (monitor %s) %s", monitor, w)
	}
}

// cpusOf returns each thread's Cpus_allowed_list in process pid.
func cpusOf(t *testing.T, pid int) map[string]string {
	t.Helper()
	tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, tid := range tids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, tid.Name()))
		if err != nil {
			continue // exited
		}
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				out[tid.Name()] = strings.TrimSpace(v)
			}
		}
	}
	return out
}

// pinnableCPU returns the CPUs this test runs on, as /proc lists them, and
// the first of them; it skips the test when that is the only one, where a
// pinned process would look like any other.
func pinnableCPU(t *testing.T) (mine, cpu string) {
	t.Helper()
	mine = cpusOf(t, os.Getpid())[strconv.Itoa(os.Getpid())]
	cpu = strings.FieldsFunc(mine, func(r rune) bool { return r == ',' || r == '-' })[0]
	if mine == cpu {
		t.Skipf("this test runs on CPU %s alone: a pinned process would look like any other", mine)
	}
	return mine, cpu
}

// TestBackupCPUs: a backup started with --cpus runs every thread, those
// it started while replicating included, on those CPUs and replicates as
// before, while the primary keeps the CPUs it was given; a --cpus that
// names no CPU, or none the process may use, is refused.
func TestBackupCPUs(t *testing.T) {
	mine, cpu := pinnableCPU(t)
	c := fstest.NewCluster(t, 1, nil)
	replicateWith(t, c, c.Backups[0], "--cpus", cpu)
	got := cpusOf(t, c.Backups[0].Cmd.Process.Pid)
	if len(got) < 3 {
		t.Errorf("only %d threads of the backup seen", len(got))
	}
	for tid, list := range got {
		if list != cpu {
			t.Errorf("backup thread %s runs on CPUs %s, want %s", tid, list, cpu)
		}
	}
	for tid, list := range cpusOf(t, c.Primary.Cmd.Process.Pid) {
		if list != mine {
			t.Errorf("primary thread %s runs on CPUs %s, want %s as this test", tid, list, mine)
		}
	}
	for _, bad := range []string{"x", "1023"} {
		out, code := run(t, "backup", "--listen", "127.0.0.1:0", "--journal", filepath.Join(t.TempDir(), "j"), "--cpus", bad, t.TempDir())
		if code != 2 || !strings.Contains(out, "--cpus "+bad) {
			t.Errorf("--cpus %s: exit %d, want 2 and a message naming the flag:\n%s", bad, code, out)
		}
	}
}
