package fstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Freeze stops p with SIGSTOP and returns once every one of its threads
// has stopped. kill(SIGSTOP) is delivered to one thread, and the group
// stop begins only when that thread next leaves the kernel: a thread
// parked in an fsync or a FUSE request lets the others go on answering
// barriers and leases for as long as it sits there, and a test that
// believes the process frozen sees it act. Thaw undoes it; Freeze also
// thaws p in Cleanup, so a failing test never leaves a stopped process.
func Freeze(t testing.TB, p *os.Process) {
	t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("freeze %d: %v", p.Pid, err)
	}
	t.Cleanup(func() { Thaw(p) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		running, err := runningThreads(p.Pid)
		if err != nil {
			t.Fatalf("freeze %d: %v", p.Pid, err)
		}
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("freeze %d: %d threads still run 10 s after SIGSTOP", p.Pid, running)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Thaw resumes a process Freeze stopped. A process that is gone already
// is not an error: Cleanup thaws whatever the test left.
func Thaw(p *os.Process) { p.Signal(syscall.SIGCONT) }

// runningThreads counts the threads of pid that are not stopped (state
// T, or t when traced). A thread that exits while it is read is skipped.
func runningThreads(pid int) (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, fmt.Errorf("list threads: %w", err)
	}
	running := 0
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(fmt.Sprintf("/proc/%d/task", pid), task.Name(), "stat"))
		if err != nil {
			continue
		}
		state, ok := threadState(string(b))
		if !ok {
			return 0, fmt.Errorf("thread %s: unreadable stat %q", task.Name(), b)
		}
		if state != 'T' && state != 't' && state != 'Z' && state != 'X' {
			running++
		}
	}
	return running, nil
}

// threadState reads the state letter of a /proc stat line; the command
// name before it is in parentheses and may hold spaces and parentheses.
func threadState(stat string) (byte, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0, false
	}
	return stat[i+2], true
}
