package timerslack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// A primary cannot take a timer slack on every thread as a backup does:
// its FUSE loop's hand-off timer and the runtime's hand-off of threads
// blocked in system calls are on the service's path. The monitor thread
// alone is another matter, and it is much of the waste: while a FUSE
// reader waits in read(2) holding a P the monitor polls every 20 µs, and
// after every request that wakes it from its deep sleep it starts over at
// 20 µs. Under WordPress that was 40 nanosleeps and 70 context switches
// per request in the mount; with the monitor's slack at 1 ms, 13 and 45,
// and a quarter less CPU (docs/PERFORMANCE.md).
//
// What the slack delays: the monitor hands the P of a thread blocked in a
// system call to runnable goroutines, 20 µs after the call began when no
// P is idle. With a slack of d that may take d longer.
//
// Go names no thread, so the monitor is recognised by what only it does:
// it sleeps in nanosleep(2) (runtime.usleep) whenever it is not in a deep
// sleep, which it enters only while every P is idle. findMonitor looks
// without pausing, so its own goroutine keeps a P busy meanwhile; the
// runtime's other usleeps last 3 µs.
//
// A thread inherits its creator's slack, and the monitor creates threads
// (when it hands a P to a goroutine and no idle thread is left): the
// keeper puts those back.

// ErrMonitorNotFound: no one thread slept in nanosleep(2) in enough
// samples.
var ErrMonitorNotFound = errors.New("the Go runtime's monitor thread was not recognised")

// monitorSamples is how often findMonitor looks at every thread.
const monitorSamples = 200

// KeepMonitor sets the timer slack of the Go runtime's monitor thread
// (sysmon) to d and, until ctx ends, puts any other thread that inherited
// it back to Default every interval; then it puts the monitor's back too.
// Until the monitor is recognised it looks for it again every interval, a
// few times. It returns when ctx ends, or at once when the process lacks
// CAP_SYS_NICE or the kernel cannot set another thread's slack; it logs
// what it did.
func KeepMonitor(ctx context.Context, d, interval time.Duration, log *slog.Logger) {
	const tries = 10
	wait := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(interval):
			return true
		}
	}
	tid := 0
	for try := 0; tid == 0; try++ {
		var err error
		tid, err = SetMonitor(d)
		switch {
		case err == nil:
			log.Info("timer slack set on the Go runtime's monitor thread", "tid", tid, "timer_slack", d)
		case try == tries-1 || errors.Is(err, ErrPermission) || errors.Is(err, ErrUnsupported):
			log.Info("the Go runtime's monitor thread keeps the kernel's timer slack", "err", err)
			return
		case !wait():
			return
		}
	}
	// The slack is the caller's while ctx lasts: a node that goes on as
	// a backup, or as a primary without it, gets the monitor back as it
	// was.
	defer write(strconv.Itoa(tid), []byte(strconv.FormatInt(Default.Nanoseconds(), 10)))
	for wait() {
		if err := resetInherited(tid, d); err != nil {
			log.Info("threads that inherited the monitor's timer slack keep it", "err", err)
			return
		}
	}
}

// SetMonitor sets the timer slack of the Go runtime's monitor thread to d
// (0 or less: Default) and returns its thread id. It needs CAP_SYS_NICE
// (ErrPermission), as Set does for any thread but the caller's.
func SetMonitor(d time.Duration) (int, error) {
	if d <= 0 {
		d = Default
	}
	tid, err := findMonitor()
	if err != nil {
		return 0, err
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(tid) + "/timerslack_ns"); err != nil {
		return 0, fmt.Errorf("set timer slack: %w", ErrUnsupported)
	}
	if err := write(strconv.Itoa(tid), []byte(strconv.FormatInt(d.Nanoseconds(), 10))); err != nil {
		return 0, err
	}
	return tid, nil
}

// resetInherited sets every thread but the monitor whose slack is d back
// to Default.
func resetInherited(monitor int, d time.Duration) error {
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("reset timer slack: %w", err)
	}
	val := []byte(strconv.FormatInt(Default.Nanoseconds(), 10))
	for _, e := range tids {
		tid, err := strconv.Atoi(e.Name())
		if err != nil || tid == monitor {
			continue
		}
		if s, err := Of(tid); err == nil && s == d {
			if err := write(e.Name(), val); err != nil {
				return err
			}
		}
	}
	return nil
}

// findMonitor samples what every thread of the process is doing and
// returns the thread that was in nanosleep(2) in 8 samples or more, when
// no other thread was in a quarter as many. (On a busy machine the monitor
// is mostly runnable rather than asleep, and shows as running: with three
// CPU hogs on two CPUs it was asleep in 14-19 of 200 samples.)
func findMonitor() (int, error) {
	self := unix.Gettid()
	seen := map[int]int{}
	for i := 0; i < monitorSamples; i++ {
		tids, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return 0, fmt.Errorf("find the monitor thread: %w", err)
		}
		for _, e := range tids {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || tid == self {
				continue
			}
			if inNanosleep(tid) {
				seen[tid]++
			}
		}
	}
	best, bestN, secondN := 0, 0, 0
	for tid, n := range seen {
		switch {
		case n > bestN:
			best, bestN, secondN = tid, n, bestN
		case n > secondN:
			secondN = n
		}
	}
	if bestN < monitorSamples/25 || secondN*4 > bestN {
		return 0, fmt.Errorf("find the monitor thread: in nanosleep %d and %d times of %d: %w", bestN, secondN, monitorSamples, ErrMonitorNotFound)
	}
	return best, nil
}

// inNanosleep reports whether thread tid is blocked in nanosleep(2):
// /proc/<pid>/task/<tid>/syscall starts with the number of the system
// call a blocked thread is in ("running" when it runs or waits to).
func inNanosleep(tid int) bool {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
	if err != nil {
		return false
	}
	nr, _, _ := bytes.Cut(b, []byte(" "))
	return string(nr) == strconv.Itoa(unix.SYS_NANOSLEEP)
}
