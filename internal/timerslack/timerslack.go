// Package timerslack sets how late the kernel may fire the timers of this
// process's threads: every thread's (Set, for backups), or only the Go
// runtime's monitor thread's (KeepMonitor, for primaries; monitor.go).
//
// Go's runtime keeps a monitor thread (sysmon) that sleeps 20 µs at a
// time for as long as any goroutine runs, and starts again at 20 µs each
// time a goroutine makes a system call after the process was idle. A
// process that wakes for every small message, as a backup does for every
// batch, pays two context switches per sleep: on a 2-vCPU VM under 4 KiB
// barriers that was six sleeps per batch and a third of a backup's CPU
// (docs/PERFORMANCE.md). A timer slack of a millisecond lets the kernel
// run those sleeps together with the thread's next wake-up, and delays the
// process's own timers (heartbeats, the apply window's idle timer) by as
// much at most.
package timerslack

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Default is the kernel's own timer slack for a thread (50 µs).
const Default = 50 * time.Microsecond

// ErrPermission: the caller lacks CAP_SYS_NICE, which the kernel asks for
// to set another thread's timer slack.
var ErrPermission = errors.New("setting the timer slack of other threads needs CAP_SYS_NICE")

// ErrUnsupported: the kernel has no /proc/<tid>/timerslack_ns (before 4.6).
var ErrUnsupported = errors.New("this kernel cannot set another thread's timer slack")

// Set sets the timer slack of every thread of the process to d (0 or less:
// Default). A thread inherits its creator's slack, so threads started
// later get it too. Threads that start while it runs are set by a further
// pass, up to a few. It changes no thread, the caller's included, when it
// returns ErrPermission or ErrUnsupported.
func Set(d time.Duration) error {
	if d <= 0 {
		d = Default
	}
	// The caller's own thread goes last: the kernel lets any thread set
	// its own slack, and a refusal for the others must leave it as it was.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self := strconv.Itoa(unix.Gettid())
	if _, err := os.Stat("/proc/" + self + "/timerslack_ns"); err != nil {
		return fmt.Errorf("set timer slack: %w", ErrUnsupported)
	}
	val := []byte(strconv.FormatInt(d.Nanoseconds(), 10))
	done := map[string]bool{self: true}
	for pass := 0; pass < 5; pass++ {
		tids, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("set timer slack: %w", err)
		}
		fresh := 0
		for _, t := range tids {
			if done[t.Name()] {
				continue
			}
			fresh++
			if err := write(t.Name(), val); err != nil {
				return err
			}
			done[t.Name()] = true
		}
		if fresh == 0 {
			break
		}
	}
	return write(self, val)
}

// write sets thread tid's slack to val. /proc/<tid> names any thread of
// any process; the task directory's entries have no timerslack_ns.
func write(tid string, val []byte) error {
	err := os.WriteFile("/proc/"+tid+"/timerslack_ns", val, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil // the thread exited
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("set timer slack: %w", ErrPermission)
	case err != nil:
		return fmt.Errorf("set timer slack of thread %s: %w", tid, err)
	}
	return nil
}

// Of returns thread tid's timer slack (of this or another process);
// os.ErrNotExist when the thread is gone.
func Of(tid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/timerslack_ns")
	if err != nil {
		return 0, fmt.Errorf("read timer slack: %w", err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read timer slack of thread %d: %w", tid, err)
	}
	return time.Duration(ns), nil
}

// Get returns the calling thread's timer slack (for tests and logs).
func Get() (time.Duration, error) {
	ns, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		return 0, fmt.Errorf("read timer slack: %w", err)
	}
	return time.Duration(ns), nil
}
