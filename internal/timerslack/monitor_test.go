package timerslack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// syscallLoad keeps every P in system calls that block for 100 µs, which
// is what keeps the monitor polling every 20 µs (it hands such a P on when
// no other is idle), until the returned stop is called. They are ppoll(2)s
// with a timeout: a nanosleep(2) would look like the monitor.
func syscallLoad() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		wg.Go(func() {
			ts := unix.NsecToTimespec(100e3)
			for {
				select {
				case <-done:
					return
				default:
				}
				unix.Ppoll(nil, &ts, nil)
			}
		})
	}
	return func() { close(done); wg.Wait() }
}

// switches returns thread tid's voluntary context switches so far.
func switches(t *testing.T, tid int) int {
	t.Helper()
	f, err := os.Open("/proc/self/task/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "voluntary_ctxt_switches:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no voluntary_ctxt_switches in status")
	return 0
}

// sleepsPerSecond counts thread tid's sleeps over 300 ms of syscallLoad.
func sleepsPerSecond(t *testing.T, tid int) float64 {
	stop := syscallLoad()
	defer stop()
	time.Sleep(50 * time.Millisecond)
	n0 := switches(t, tid)
	time.Sleep(300 * time.Millisecond)
	return float64(switches(t, tid)-n0) / 0.3
}

// TestSetMonitorSlowsTheMonitor: the thread SetMonitor picks is the one
// that wakes thousands of times a second while Ps are blocked in system
// calls, it wakes several times less with its slack at 1 ms, and no other
// thread's slack changes (threads it starts later inherit it). A machine
// busy enough to keep the monitor from running gets three tries.
func TestSetMonitorSlowsTheMonitor(t *testing.T) {
	if errors.Is(Set(Default), ErrPermission) {
		t.Skip("needs CAP_SYS_NICE")
	}
	// Threads the monitor starts inherit its slack: every thread goes
	// back to the default after the test.
	t.Cleanup(func() { Set(Default) })
	var why error
	for try := 0; try < 3; try++ {
		if why = monitorSlowed(t); why == nil {
			return
		}
		t.Log(why)
		Set(Default)
	}
	t.Fatal(why)
}

// monitorSlowed finds the monitor, sets its slack and checks what it did.
func monitorSlowed(t *testing.T) error {
	stop := syscallLoad()
	tid, err := findMonitor()
	stop()
	if err != nil {
		return err
	}
	others, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	before := sleepsPerSecond(t, tid)
	got, err := SetMonitor(time.Millisecond)
	if err != nil {
		return err
	}
	if got != tid {
		return fmt.Errorf("SetMonitor picked thread %d, findMonitor %d", got, tid)
	}
	if s := slackOf(t, strconv.Itoa(tid)); s != time.Millisecond {
		t.Fatalf("monitor's slack %v, want 1ms", s)
	}
	after := sleepsPerSecond(t, tid)
	t.Logf("monitor thread %d: %.0f sleeps/s at the default slack, %.0f at 1 ms", tid, before, after)
	if before < 1000 || after*2 > before {
		return fmt.Errorf("monitor thread %d woke %.0f times/s before and %.0f after: not the monitor, or not slowed", tid, before, after)
	}
	for _, e := range others {
		if e.Name() == strconv.Itoa(tid) {
			continue
		}
		if s := slackOf(t, e.Name()); s != -1 && s != Default {
			t.Errorf("thread %s's slack %v, want the default", e.Name(), s)
		}
	}
	return nil
}

// TestKeepMonitorResetsInheritors: a thread that took the monitor's slack
// (as one the monitor starts does) is put back to the default, the
// monitor keeps its own while KeepMonitor runs and gets the default back
// when it returns.
func TestKeepMonitorResetsInheritors(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self := strconv.Itoa(unix.Gettid())
	if errors.Is(write(self, []byte("50000")), ErrPermission) {
		t.Skip("needs CAP_SYS_NICE")
	}
	stop := syscallLoad()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		KeepMonitor(ctx, 700*time.Microsecond, 20*time.Millisecond, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		Set(Default)
	})
	monitor := 0
	for deadline := time.Now().Add(5 * time.Second); monitor == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no thread took the monitor's slack within 5s")
		}
		tids, _ := os.ReadDir("/proc/self/task")
		for _, e := range tids {
			if e.Name() != self && slackOf(t, e.Name()) == 700*time.Microsecond {
				monitor, _ = strconv.Atoi(e.Name())
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 700e3, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); slackOf(t, self) != Default; {
		if time.Now().After(deadline) {
			t.Fatalf("an inheritor's slack is still %v after 5s", slackOf(t, self))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := slackOf(t, strconv.Itoa(monitor)); s != 700*time.Microsecond {
		t.Fatalf("the monitor's slack went to %v", s)
	}
	cancel()
	<-done
	if s := slackOf(t, strconv.Itoa(monitor)); s != Default {
		t.Fatalf("the monitor's slack stayed %v after KeepMonitor returned", s)
	}
}
