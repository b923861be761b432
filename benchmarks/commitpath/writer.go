package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// writer commits in a loop on one locked thread, so that the trace can
// follow it by its thread id: a pwrite of size bytes, then fdatasync.
type writer struct {
	tid  int
	stop func()

	mu  sync.Mutex
	lat []time.Duration // since the last latencies call
}

func startWriter(path string, size int, gap time.Duration) (*writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("writer: %w", err)
	}
	w := &writer{}
	ready := make(chan int)
	var quit atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer f.Close()
		runtime.LockOSThread()
		ready <- unix.Gettid()
		buf := make([]byte, size)
		for i := 0; !quit.Load(); i++ {
			start := time.Now()
			if _, err := unix.Pwrite(int(f.Fd()), buf, int64(i%256)*int64(size)); err != nil {
				return
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				return
			}
			w.mu.Lock()
			w.lat = append(w.lat, time.Since(start))
			w.mu.Unlock()
			time.Sleep(gap)
		}
	}()
	w.tid = <-ready
	w.stop = func() { quit.Store(true); <-done }
	return w, nil
}

// latencies lets the writer run for d and returns its commits' latencies,
// sorted.
func (w *writer) latencies(ctx context.Context, d time.Duration) []time.Duration {
	w.mu.Lock()
	w.lat = nil
	w.mu.Unlock()
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.lat)
	slices.Sort(out)
	return out
}
