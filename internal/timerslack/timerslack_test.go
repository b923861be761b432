package timerslack

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// slackOf reads thread tid's timer slack; -1 if it exited.
func slackOf(t *testing.T, tid string) time.Duration {
	t.Helper()
	n, err := strconv.Atoi(tid)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Of(n)
	if errors.Is(err, os.ErrNotExist) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// onNewThreads reports the slack seen by n goroutines, each locked to a
// thread of its own while the others hold theirs, so the runtime starts
// threads for them.
func onNewThreads(t *testing.T, n int) []time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	hold := make(chan struct{})
	out := make([]time.Duration, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			d, err := Get()
			if err != nil {
				t.Error(err)
			}
			out[i] = d
			<-hold
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(hold)
	wg.Wait()
	return out
}

// TestSetEveryThread: Set reaches every thread the process has and every
// thread it starts later, and Set(0) brings back the kernel's default.
func TestSetEveryThread(t *testing.T) {
	const want = 1500 * time.Microsecond
	if err := Set(want); errors.Is(err, ErrPermission) {
		t.Skip("needs CAP_SYS_NICE")
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Set(0) })
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		if got := slackOf(t, tid.Name()); got != want && got != -1 {
			t.Errorf("thread %s: slack %v, want %v", tid.Name(), got, want)
		}
	}
	for i, got := range onNewThreads(t, 8) {
		if got != want {
			t.Errorf("new thread %d: slack %v, want %v", i, got, want)
		}
	}
	if err := Set(0); err != nil {
		t.Fatal(err)
	}
	for i, got := range onNewThreads(t, 4) {
		if got != Default {
			t.Errorf("after Set(0), thread %d: slack %v, want %v", i, got, Default)
		}
	}
}

// TestSetWithoutPrivilege: without CAP_SYS_NICE, Set says so and leaves
// every thread as it was, the caller's own included (the kernel would let
// that one change). Run as uid 1000 in a child of the test binary.
func TestSetWithoutPrivilege(t *testing.T) {
	if os.Getenv("PBFS_TIMERSLACK_CHILD") == "1" {
		err := Set(time.Millisecond)
		if !errors.Is(err, ErrPermission) {
			t.Fatalf("Set without CAP_SYS_NICE: %v, want ErrPermission", err)
		}
		for i, got := range onNewThreads(t, 4) {
			if got != Default {
				t.Fatalf("thread %d: slack %v after a refused Set", i, got)
			}
		}
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to run a child as another user")
	}
	// A copy of the test binary that uid 1000 can reach and run.
	dir := t.TempDir()
	for d := dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "timerslack.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestSetWithoutPrivilege$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PBFS_TIMERSLACK_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child as uid 1000: %v\n%s", err, out)
	}
}
