package benchproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Calibration is what the machine charges for the primitives a barrier is
// made of: a system call, a thread woken by another (a FUSE request and
// its answer are two such wake-ups, and so is every hop of a batch between
// processes), and a synced 4 KiB write. On a virtual machine these cost
// far more than on bare metal, and more in some hours than in others;
// reports print the calibration at their start and end, so that a run
// which fell into a slow spell shows it, and docs/PERFORMANCE.md reasons
// from it about what a barrier can cost at best.
type Calibration struct {
	Syscall   time.Duration // getppid(2), mean of many
	WakeSame  time.Duration // pipe round trip between two threads on one CPU, median of runs
	WakeCross time.Duration // the same with the threads on two CPUs; 0 on a one-CPU machine
	Fdatasync time.Duration // pwrite of 4 KiB into a written file, then fdatasync: median
	Err       error         // why a part could not be measured
}

// Calibrate measures the machine in about a second (more on a slow
// disk), the synced writes in a temporary file under dir. The wake-ups
// run on the first two CPUs the process may use.
func Calibrate(dir string) Calibration {
	var c Calibration
	c.Syscall = syscallCost(200_000)
	cpus := usableCPUs(2)
	c.WakeSame, c.Err = wakeRoundTrip(cpus[0], cpus[0])
	if len(cpus) > 1 && c.Err == nil {
		c.WakeCross, c.Err = wakeRoundTrip(cpus[0], cpus[1])
	}
	if c.Err == nil {
		c.Fdatasync, c.Err = syncedWrite(dir, 200)
	}
	return c
}

// usableCPUs returns up to n CPUs the process may run on, at least one
// (-1 when the affinity cannot be read: the threads then run unpinned).
func usableCPUs(n int) []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return []int{-1}
	}
	var out []int
	for c := 0; c < len(set)*64 && len(out) < n; c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return []int{-1}
	}
	return out
}

// String is the calibration as one line of a report.
func (c Calibration) String() string {
	s := fmt.Sprintf("system call %.2f µs; thread wake-up round trip %.1f µs on one CPU", us(c.Syscall), us(c.WakeSame))
	if c.WakeCross > 0 {
		s += fmt.Sprintf(", %.1f µs across two", us(c.WakeCross))
	}
	s += fmt.Sprintf("; 4 KiB write + fdatasync p50 %.0f µs", us(c.Fdatasync))
	if c.Err != nil {
		s += " (" + c.Err.Error() + ")"
	}
	return s
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

func syscallCost(n int) time.Duration {
	t := time.Now()
	for range n {
		unix.Getppid()
	}
	return time.Since(t) / time.Duration(n)
}

// errPipeClosed: the other thread of a round trip stopped.
var errPipeClosed = errors.New("the other end closed")

// wakeRoundTrip bounces a byte between two threads pinned to CPUs a and b
// through two pipes, each thread blocked in read(2) until the other
// writes, and returns the median over 5 runs of the mean round trip.
//
// Each thread owns the write end it writes to and closes it when it
// stops, for any reason, so that the other one's read ends too; the read
// ends are closed once both have stopped. A goroutine that returns while
// locked to its thread takes the thread with it, so no pinned thread is
// left behind.
func wakeRoundTrip(a, b int) (time.Duration, error) {
	var ping, pong [2]int // bounce writes ping, echo writes pong
	if err := unix.Pipe2(ping[:], unix.O_CLOEXEC); err != nil {
		return 0, fmt.Errorf("calibrate: pipe: %w", err)
	}
	if err := unix.Pipe2(pong[:], unix.O_CLOEXEC); err != nil {
		unix.Close(ping[0])
		unix.Close(ping[1])
		return 0, fmt.Errorf("calibrate: pipe: %w", err)
	}
	defer unix.Close(ping[0])
	defer unix.Close(pong[0])
	const runs, trips = 5, 1000
	echoed := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer unix.Close(pong[1])
		echoed <- echo(b, ping[0], pong[1], runs*trips)
	}()
	type result struct {
		means []time.Duration
		err   error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer unix.Close(ping[1])
		means, err := bounce(a, pong[0], ping[1], runs, trips)
		res <- result{means, err}
	}()
	r, echoErr := <-res, <-echoed
	switch {
	case r.err != nil:
		return 0, r.err
	case echoErr != nil:
		return 0, echoErr
	}
	slices.Sort(r.means)
	return r.means[runs/2], nil
}

// echo answers n bytes read from in with a byte written to out, on cpu.
func echo(cpu, in, out, n int) error {
	if err := pin(cpu); err != nil {
		return err
	}
	var buf [1]byte
	for range n {
		if err := readByte(in, buf[:]); err != nil {
			return err
		}
		if _, err := unix.Write(out, buf[:]); err != nil {
			return fmt.Errorf("calibrate: write: %w", err)
		}
	}
	return nil
}

// bounce sends a byte on out and waits for it on in, trips times per run,
// and returns each run's mean round trip.
func bounce(cpu, in, out, runs, trips int) ([]time.Duration, error) {
	if err := pin(cpu); err != nil {
		return nil, err
	}
	var buf [1]byte
	var means []time.Duration
	for range runs {
		t := time.Now()
		for range trips {
			if _, err := unix.Write(out, buf[:]); err != nil {
				return nil, fmt.Errorf("calibrate: write: %w", err)
			}
			if err := readByte(in, buf[:]); err != nil {
				return nil, err
			}
		}
		means = append(means, time.Since(t)/time.Duration(trips))
	}
	return means, nil
}

func readByte(fd int, buf []byte) error {
	for {
		n, err := unix.Read(fd, buf)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return fmt.Errorf("calibrate: read: %w", err)
		case n == 0:
			return fmt.Errorf("calibrate: read: %w", errPipeClosed)
		}
		return nil
	}
}

// pin keeps the calling thread on cpu (-1: anywhere).
func pin(cpu int) error {
	if cpu < 0 {
		return nil
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("calibrate: pin a thread to CPU %d: %w", cpu, err)
	}
	return nil
}

// syncedWrite writes 4 KiB at successive offsets of a file whose blocks
// are already written, as the journal's appends do, and returns the
// median time of the write and its fdatasync.
func syncedWrite(dir string, n int) (time.Duration, error) {
	f, err := os.CreateTemp(dir, ".pbfs-calibrate-*")
	if err != nil {
		return 0, fmt.Errorf("calibrate: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 4096)
	if _, err := f.Write(make([]byte, n*len(block))); err != nil {
		return 0, fmt.Errorf("calibrate: write %s: %w", filepath.Base(f.Name()), err)
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("calibrate: fsync: %w", err)
	}
	took := make([]time.Duration, 0, n)
	for i := range n {
		block[0] = byte(i + 1)
		t := time.Now()
		if _, err := f.WriteAt(block, int64(i*len(block))); err != nil {
			return 0, fmt.Errorf("calibrate: write: %w", err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return 0, fmt.Errorf("calibrate: fdatasync: %w", err)
		}
		took = append(took, time.Since(t))
	}
	slices.Sort(took)
	return took[n/2], nil
}
