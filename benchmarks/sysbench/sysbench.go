package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// sbResult is what one sysbench run printed.
type sbResult struct {
	txns        int64
	tps         float64
	errPerSec   float64
	p50         float64 // ms, from the histogram
	p95         float64
	p99         float64
	p99Reported float64 // ms, sysbench's own --percentile=99 line
	maxLat      float64
	intervalTPS []float64 // per --report-interval
	cpu         cpuUse    // over the run
	curve       []ratePoint
}

// ratePoint is one open-loop run at a fixed offered rate (sysbench
// --rate): latency as sysbench reports it in that mode.
type ratePoint struct {
	offered, tps  float64
	p50, p95, p99 float64
	overloaded    bool // sysbench gave up: its event queue overflowed
}

// firstErrLine is the first line of the first non-nil error.
func firstErrLine(errs ...error) string {
	for _, err := range errs {
		if err != nil {
			l, _, _ := strings.Cut(err.Error(), "\n")
			return l
		}
	}
	return ""
}

// sysbench runs one phase (prepare, run, cleanup) of a workload against
// the server and returns its output, also kept in the run directory.
func (b *bench) sysbench(ctx context.Context, s *server, workload, phase, logName string, extra ...string) (string, error) {
	argv := []string{workload, "--db-driver=mysql", "--mysql-socket=" + s.sock(), "--mysql-user=root", "--mysql-db=sbtest",
		fmt.Sprintf("--tables=%d", b.cfg.tables), fmt.Sprintf("--table-size=%d", b.cfg.rows), fmt.Sprintf("--threads=%d", b.cfg.threads)}
	timeout := 30 * time.Minute
	if phase == "run" {
		argv = append(argv, fmt.Sprintf("--time=%d", int(b.cfg.duration.Seconds())), "--report-interval=5",
			"--percentile=99", "--histogram=on")
		argv = append(argv, extra...)
		timeout = b.cfg.duration + 5*time.Minute
	}
	argv = append(argv, phase)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/sysbench", argv...)
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState != nil {
		b.sysbenchCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	os.WriteFile(filepath.Join(b.runDir, logName), out, 0o644)
	if err != nil {
		return string(out), fmt.Errorf("sysbench %s %s on %s: %w\n%s", workload, phase, s.name, err, tail(string(out), 15))
	}
	return string(out), nil
}

var (
	reTxns     = regexp.MustCompile(`transactions:\s+(\d+)\s+\(([\d.]+) per sec\.\)`)
	reErrs     = regexp.MustCompile(`ignored errors:\s+\d+\s+\(([\d.]+) per sec\.\)`)
	reP99      = regexp.MustCompile(`(\d+)th percentile:\s+([\d.]+)`)
	reMax      = regexp.MustCompile(`max:\s+([\d.]+)`)
	reInterval = regexp.MustCompile(`^\[ *\d+s \] thds: \d+ tps: ([\d.]+)`)
	reHist     = regexp.MustCompile(`^\s+([\d.]+) \|[* ]*?(\d+)\s*$`)
)

// parseRun reads sysbench 1.0's output of a run with --histogram=on.
func parseRun(out string) (sbResult, error) {
	var r sbResult
	m := reTxns.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no transactions line in sysbench's output")
	}
	r.txns, _ = strconv.ParseInt(m[1], 10, 64)
	r.tps, _ = strconv.ParseFloat(m[2], 64)
	if m := reErrs.FindStringSubmatch(out); m != nil {
		r.errPerSec, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reP99.FindStringSubmatch(out); m != nil {
		r.p99Reported, _ = strconv.ParseFloat(m[2], 64)
	}
	if m := reMax.FindStringSubmatch(out); m != nil {
		r.maxLat, _ = strconv.ParseFloat(m[1], 64)
	}
	type bucket struct {
		v float64
		n int64
	}
	var hist []bucket
	var total int64
	for _, l := range strings.Split(out, "\n") {
		if m := reInterval.FindStringSubmatch(l); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			r.intervalTPS = append(r.intervalTPS, v)
			continue
		}
		if m := reHist.FindStringSubmatch(l); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			n, _ := strconv.ParseInt(m[2], 10, 64)
			hist = append(hist, bucket{v, n})
			total += n
		}
	}
	if total == 0 {
		return r, fmt.Errorf("no latency histogram in sysbench's output")
	}
	sort.Slice(hist, func(i, j int) bool { return hist[i].v < hist[j].v })
	pct := func(p float64) float64 {
		want := int64(math.Ceil(p / 100 * float64(total)))
		var seen int64
		for _, h := range hist {
			if seen += h.n; seen >= want {
				return h.v
			}
		}
		return hist[len(hist)-1].v
	}
	r.p50, r.p95, r.p99 = pct(50), pct(95), pct(99)
	return r, nil
}

// workloadRun prepares the tables, runs the workload (calling around
// before and after the measured run) and drops the tables again.
func (b *bench) workloadRun(s *server, scenario, workload string, around func(after bool) error) (sbResult, error) {
	ctx := b.ctx
	var r sbResult
	if _, err := s.query(ctx, "DROP DATABASE IF EXISTS sbtest; CREATE DATABASE sbtest"); err != nil {
		return r, err
	}
	tag := slug(scenario + "-" + workload)
	fmt.Fprintf(os.Stderr, "   %s: prepare (%d tables of %d rows)\n", tag, b.cfg.tables, b.cfg.rows)
	if _, err := b.sysbench(ctx, s, workload, "prepare", tag+"-prepare.log"); err != nil {
		return r, err
	}
	// Let the prepare's page flushing settle a little, then start level.
	exec.Command("sync").Run()
	time.Sleep(2 * time.Second)
	if around != nil {
		if err := around(false); err != nil {
			return r, err
		}
	}
	fmt.Fprintf(os.Stderr, "   %s: run %s\n", tag, b.cfg.duration)
	cpu0 := b.snapCPU()
	out, err := b.sysbench(ctx, s, workload, "run", tag+"-run.log")
	if err != nil {
		return r, err
	}
	cpu := cpuBetween(cpu0, b.snapCPU(), b.sysbenchCPU)
	if r, err = parseRun(out); err != nil {
		return r, fmt.Errorf("%s: %w (log %s-run.log)", tag, err, tag)
	}
	r.cpu = cpu
	fmt.Fprintf(os.Stderr, "   %s: %.1f tps, p95 %.2f ms, p99 %.2f ms\n", tag, r.tps, r.p95, r.p99)
	if around != nil {
		if err := around(true); err != nil {
			return r, err
		}
	}
	if scenario == "plain" {
		b.plainTPS[workload] = r.tps
	}
	if peak := b.plainTPS[workload]; peak > 0 {
		for _, f := range b.cfg.fractions {
			rate := int(f*peak + 0.5)
			out, err := b.sysbench(ctx, s, workload, "run", fmt.Sprintf("%s-rate-%d.log", tag, rate), fmt.Sprintf("--rate=%d", rate))
			pr, perr := parseRun(out)
			if err != nil || perr != nil {
				// Past its capacity sysbench's event queue overflows and it
				// exits non-zero: the scenario cannot take this rate.
				r.curve = append(r.curve, ratePoint{offered: float64(rate), overloaded: true})
				fmt.Fprintf(os.Stderr, "   %s: at --rate=%d: overloaded (%v)\n", tag, rate, firstErrLine(err, perr))
				break
			}
			r.curve = append(r.curve, ratePoint{offered: float64(rate), tps: pr.tps, p50: pr.p50, p95: pr.p95, p99: pr.p99})
			fmt.Fprintf(os.Stderr, "   %s: at --rate=%d: %.1f tps, p50 %.2f ms, p99 %.2f ms\n", tag, rate, pr.tps, pr.p50, pr.p99)
		}
	}
	if _, err := b.sysbench(ctx, s, workload, "cleanup", tag+"-cleanup.log"); err != nil {
		return r, err
	}
	return r, nil
}

// slug makes a name fit for a file name.
func slug(s string) string {
	return strings.Trim(regexp.MustCompile(`[^A-Za-z0-9_.=-]+`).ReplaceAllString(s, "-"), "-")
}

// clockTicks is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const clockTicks = 100

// cpuSnap is the CPU time used so far by the machine and by the
// benchmark's processes, by group (mariadbd, mount, backups).
type cpuSnap struct {
	at    time.Time
	busy  int64 // machine, all CPUs, in ticks
	procs map[string]int64
}

// snapCPU reads /proc for the machine and every running server, mount and
// backup.
func (b *bench) snapCPU() cpuSnap {
	s := cpuSnap{at: time.Now(), procs: map[string]int64{}}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])
		for i, v := range f[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			// user nice system idle iowait irq softirq steal: not idle, iowait.
			if i != 3 && i != 4 && i < 8 {
				s.busy += n
			}
		}
	}
	for _, srv := range b.servers {
		if srv.proc != nil {
			s.procs["mariadbd"] += procTicks(srv.proc.Cmd.Process.Pid)
		}
	}
	for _, c := range b.clusters {
		if c.Mount != nil && !c.MountStopped() {
			s.procs["mount"] += procTicks(c.Mount.Cmd.Process.Pid)
		}
		for _, p := range c.Backups {
			s.procs["backups"] += procTicks(p.Cmd.Process.Pid)
		}
	}
	return s
}

// procTicks is a process's user and system time, all threads.
func procTicks(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces; fields count from after its ')'.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k
}

// cpuUse is CPU use over a run in vCPUs (CPU seconds per second).
type cpuUse struct {
	machine, mariadbd, mount, backups, sysbench float64
}

func cpuBetween(a, z cpuSnap, sysbench time.Duration) cpuUse {
	secs := z.at.Sub(a.at).Seconds()
	if secs <= 0 {
		return cpuUse{}
	}
	per := func(ticks int64) float64 { return float64(ticks) / clockTicks / secs }
	return cpuUse{
		machine:  per(z.busy - a.busy),
		mariadbd: per(z.procs["mariadbd"] - a.procs["mariadbd"]),
		mount:    per(z.procs["mount"] - a.procs["mount"]),
		backups:  per(z.procs["backups"] - a.procs["backups"]),
		sysbench: sysbench.Seconds() / secs,
	}
}

// other is what the machine did besides the benchmark's processes.
func (u cpuUse) other() float64 {
	return max(0, u.machine-u.mariadbd-u.mount-u.backups-u.sysbench)
}
