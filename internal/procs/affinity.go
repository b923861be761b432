package procs

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// A backup's threads hand work to one another for every batch: the
// receiver to the store loop, the thread back from its fdatasync to the
// one that took its P meanwhile, the applier. On a virtual machine a
// wake-up on another vCPU costs several times one on the same vCPU (an
// interrupt between vCPUs goes through the hypervisor): on the 2-vCPU
// machine of docs/PERFORMANCE.md, a thread wake-up round trip took 8 µs
// on one vCPU and 25-30 µs across two, and a backup pinned to one vCPU
// spent 12-31 % less CPU per small batch. Go places threads where the
// kernel puts them, so the only way to keep a backup's wake-ups on one
// vCPU is its CPU affinity, which Pin sets for every thread of the
// process. It is the operator's choice (`--cpus`), not a default: a
// process pinned to a CPU another busy one shares cannot move away from
// it.

// Errors of a CPU list.
var (
	ErrNoCPUs         = errors.New("no CPU named")
	ErrCPUsNotAllowed = errors.New("not a CPU this process may run on")
)

// ParseCPUs parses a CPU list as taskset(1) and cpuset(7) write it:
// numbers and ranges separated by commas ("1", "0,2", "2-3").
func ParseCPUs(s string) (unix.CPUSet, error) {
	var set unix.CPUSet
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := cpuNumber(lo)
		b := a
		if err == nil && isRange {
			b, err = cpuNumber(hi)
		}
		if err != nil || b < a || b >= len(set)*64 {
			return set, fmt.Errorf("cpu list %q: %q is not a CPU or a range of them", s, part)
		}
		for c := a; c <= b; c++ {
			set.Set(c)
		}
	}
	if set.Count() == 0 {
		return set, fmt.Errorf("cpu list %q: %w", s, ErrNoCPUs)
	}
	return set, nil
}

// Usable checks that every CPU of set is one the process may run on now
// (its affinity, as its cpuset and the kernel allow), so that a list with
// a typo fails at start rather than pinning less than it says.
func Usable(set unix.CPUSet) error {
	var cur unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cur); err != nil {
		return fmt.Errorf("read the affinity: %w", err)
	}
	var bad unix.CPUSet
	for c := range len(set) * 64 {
		if set.IsSet(c) && !cur.IsSet(c) {
			bad.Set(c)
		}
	}
	if bad.Count() > 0 {
		return fmt.Errorf("CPU %s: %w (it may use %s)", FormatCPUs(bad), ErrCPUsNotAllowed, FormatCPUs(cur))
	}
	return nil
}

// FormatCPUs names the CPUs of set, comma-separated.
func FormatCPUs(set unix.CPUSet) string {
	var names []string
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			names = append(names, strconv.Itoa(c))
		}
	}
	return strings.Join(names, ",")
}

// cpuNumber parses a CPU number: decimal digits only.
func cpuNumber(s string) (int, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, strconv.ErrSyntax
	}
	return strconv.Atoi(s)
}

var (
	pinMu    sync.Mutex
	original *unix.CPUSet // the process's affinity before the first Pin
)

// Pin runs every thread of the process, and so every thread it starts
// later, on the CPUs of set only. The first Pin keeps the affinity it
// replaces for Unpin. If it fails, it puts back the affinity from before.
func Pin(set unix.CPUSet) error {
	pinMu.Lock()
	defer pinMu.Unlock()
	if original == nil {
		var cur unix.CPUSet
		if err := unix.SchedGetaffinity(0, &cur); err != nil {
			return fmt.Errorf("pin: read the affinity: %w", err)
		}
		original = &cur
	}
	if err := setAll(set); err != nil {
		setAll(*original)
		return err
	}
	return nil
}

// Unpin gives every thread the affinity the process had before Pin; it
// does nothing if Pin never ran.
func Unpin() error {
	pinMu.Lock()
	defer pinMu.Unlock()
	if original == nil {
		return nil
	}
	return setAll(*original)
}

// errThreadsKeptComing: setAll's passes never found every thread set.
var errThreadsKeptComing = errors.New("threads kept starting with another affinity")

// setAll sets the affinity of every thread. A thread inherits its
// creator's affinity, so one started during a pass by a thread not yet
// set can escape it: passes repeat until one finds every thread already
// set.
func setAll(set unix.CPUSet) error {
	for range 10 {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("pin: %w", err)
		}
		changed := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			var cur unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &cur); err == nil && cur == set {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue // the thread exited meanwhile
				}
				return fmt.Errorf("pin thread %d: %w", tid, err)
			}
			changed++
		}
		if changed == 0 {
			return nil
		}
	}
	return fmt.Errorf("pin: %w", errThreadsKeptComing)
}
