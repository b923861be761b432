package benchproc

import (
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

// Calibrate measures the machine in about half a second (more on a slow
// disk), the synced writes in a temporary file under dir.
func Calibrate(dir string) Calibration {
	var c Calibration
	c.Syscall = syscallCost(200_000)
	c.WakeSame, c.Err = wakeRoundTrip(0, 0)
	if runtime.NumCPU() > 1 && c.Err == nil {
		c.WakeCross, c.Err = wakeRoundTrip(0, 1)
	}
	if c.Err == nil {
		c.Fdatasync, c.Err = syncedWrite(dir, 200)
	}
	return c
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

// wakeRoundTrip bounces a byte between two threads pinned to CPUs a and b
// through two pipes, each thread blocked in read(2) until the other
// writes, and returns the median over 5 runs of the mean round trip.
func wakeRoundTrip(a, b int) (time.Duration, error) {
	var ping, pong [2]int
	if err := unix.Pipe2(ping[:], unix.O_CLOEXEC); err != nil {
		return 0, fmt.Errorf("calibrate: pipe: %w", err)
	}
	if err := unix.Pipe2(pong[:], unix.O_CLOEXEC); err != nil {
		unix.Close(ping[0])
		unix.Close(ping[1])
		return 0, fmt.Errorf("calibrate: pipe: %w", err)
	}
	defer func() {
		for _, fd := range []int{ping[0], ping[1], pong[0], pong[1]} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	const runs, trips = 5, 1000
	echoed := make(chan error, 1)
	go func() {
		// A goroutine that returns while locked takes its pinned
		// thread with it, so no thread of the program stays pinned.
		runtime.LockOSThread()
		echoed <- echo(b, pong[0], ping[1], runs*trips)
	}()
	res := make(chan []time.Duration, 1)
	go func() {
		runtime.LockOSThread()
		res <- bounce(a, ping[0], pong[1], runs, trips)
	}()
	means := <-res
	if len(means) < runs {
		unix.Close(ping[1]) // echo's read sees the end and returns
		ping[1] = -1
	}
	if err := <-echoed; err != nil {
		return 0, err
	}
	if len(means) < runs {
		return 0, fmt.Errorf("calibrate: wake-up round trip on CPUs %d and %d failed", a, b)
	}
	slices.Sort(means)
	return means[runs/2], nil
}

// echo answers n bytes read from in with a byte written to out, on cpu.
func echo(cpu, in, out, n int) error {
	pin(cpu)
	var buf [1]byte
	for range n {
		if k, err := unix.Read(in, buf[:]); err != nil || k == 0 {
			return fmt.Errorf("calibrate: read: %v", err)
		}
		if _, err := unix.Write(out, buf[:]); err != nil {
			return fmt.Errorf("calibrate: write: %w", err)
		}
	}
	return nil
}

// bounce sends a byte on out and waits for it on in, trips times per run,
// and returns each run's mean round trip.
func bounce(cpu, in, out, runs, trips int) []time.Duration {
	pin(cpu)
	var buf [1]byte
	var means []time.Duration
	for range runs {
		t := time.Now()
		for range trips {
			if _, err := unix.Write(out, buf[:]); err != nil {
				return means
			}
			if _, err := unix.Read(in, buf[:]); err != nil {
				return means
			}
		}
		means = append(means, time.Since(t)/time.Duration(trips))
	}
	return means
}

// pin keeps the calling thread on cpu, when the machine has it.
func pin(cpu int) {
	if cpu >= runtime.NumCPU() {
		return
	}
	var set unix.CPUSet
	set.Set(cpu)
	unix.SchedSetaffinity(0, &set) // best effort: an unpinned run still measures a wake-up
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
