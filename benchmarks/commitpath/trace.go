package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// kind is a traced event's kind.
type kind uint8

const (
	sysEnter  kind = iota // raw_syscalls:sys_enter
	sysExit               // raw_syscalls:sys_exit
	waking                // sched:sched_waking: tid makes target runnable
	switchOut             // sched:sched_switch: tid leaves the CPU
)

// event is one line of `perf script -F comm,pid,tid,cpu,time,event,trace`.
type event struct {
	t      float64 // seconds
	pid    int
	tid    int
	kind   kind
	nr     int    // the system call (sysEnter, sysExit)
	target int    // the thread woken (waking)
	state  string // the state it left the CPU in (switchOut): S sleeping, D in I/O, R preempted
}

var (
	lineRE   = regexp.MustCompile(`^\s*(.+?)\s+(\d+)/(\d+)\s+\[\d+\]\s+([\d.]+):\s+(\S+):\s*(.*)$`)
	nrRE     = regexp.MustCompile(`NR (\d+)`)
	wakeRE   = regexp.MustCompile(`pid=(\d+)`)
	prevRE   = regexp.MustCompile(`prev_pid=(\d+) .*prev_state=(\S+)`)
	events   = map[string]kind{"raw_syscalls:sys_enter": sysEnter, "raw_syscalls:sys_exit": sysExit, "sched:sched_waking": waking, "sched:sched_switch": switchOut}
	errShort = errors.New("trace: no events of the kinds traced")
)

// parseTrace reads perf script's lines; lines of other events are skipped.
func parseTrace(r io.Reader) ([]event, error) {
	var out []event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if e, ok := parseLine(sc.Text()); ok {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	if len(out) == 0 {
		return nil, errShort
	}
	return out, nil
}

func parseLine(l string) (event, bool) {
	m := lineRE.FindStringSubmatch(l)
	if m == nil {
		return event{}, false
	}
	k, ok := events[m[5]]
	if !ok {
		return event{}, false
	}
	e := event{kind: k}
	e.pid, _ = strconv.Atoi(m[2])
	e.tid, _ = strconv.Atoi(m[3])
	e.t, _ = strconv.ParseFloat(m[4], 64)
	rest := m[6]
	switch k {
	case sysEnter, sysExit:
		n := nrRE.FindStringSubmatch(rest)
		if n == nil {
			return event{}, false
		}
		e.nr, _ = strconv.Atoi(n[1])
	case waking:
		n := wakeRE.FindStringSubmatch(rest)
		if n == nil {
			return event{}, false
		}
		e.target, _ = strconv.Atoi(n[1])
	case switchOut:
		n := prevRE.FindStringSubmatch(rest)
		if n == nil {
			return event{}, false
		}
		// The switch is traced on the CPU the thread leaves: the event's
		// own tid is the thread that ran.
		e.state = strings.TrimSuffix(n[2], "+")
	}
	return e, true
}

// syscallNames names the x86-64 system calls the commit path makes.
var syscallNames = map[int]string{
	0: "read", 1: "write", 3: "close", 5: "fstat", 7: "poll", 8: "lseek", 17: "pread64",
	18: "pwrite64", 19: "readv", 20: "writev", 24: "sched_yield", 35: "nanosleep", 44: "sendto",
	45: "recvfrom", 46: "sendmsg", 47: "recvmsg", 72: "fcntl", 74: "fsync", 75: "fdatasync",
	137: "statfs", 138: "fstatfs", 202: "futex", 228: "clock_gettime", 230: "clock_nanosleep",
	232: "epoll_wait", 233: "epoll_ctl", 257: "openat", 262: "newfstatat", 281: "epoll_pwait",
	285: "fallocate", 295: "preadv", 296: "pwritev", 306: "syncfs", 327: "preadv2", 328: "pwritev2",
}

func syscallName(nr int) string {
	if n, ok := syscallNames[nr]; ok {
		return n
	}
	return "syscall " + strconv.Itoa(nr)
}
