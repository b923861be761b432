package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	report_ "github.com/pbfs/pbfs/benchmarks/internal/report"
)

// report collects a run's results and writes them as Markdown.
type report struct {
	b          *bench
	start, end time.Time
	loadStart  string
	cal        [2]benchproc.Calibration // the machine at the start and at the end
	otherFUSE  int
	plainFS    string
	rows       []*row
	tune       []*row
	checks     map[string][]string
	findings   map[string][]map[string]string
	complaints []string
	failures   []string
}

func newReport(b *bench) *report {
	load, _ := os.ReadFile("/proc/loadavg")
	mounts, _ := os.ReadFile("/proc/mounts")
	return &report{b: b, start: time.Now(), loadStart: strings.Join(strings.Fields(string(load))[:3], " "),
		otherFUSE: strings.Count(string(mounts), " fuse."), checks: map[string][]string{}, findings: map[string][]map[string]string{}}
}

func (rep *report) markdown() string {
	var w strings.Builder
	rep.writeHeader(&w)
	if len(rep.rows) > 0 {
		rep.writeResults(&w)
	}
	if len(rep.tune) > 0 {
		rep.writeTune(&w)
	}
	if all := append(slices.Clone(rep.rows), rep.tune...); len(all) > 0 {
		writeCPU(&w, all)
	}
	rep.writeChecks(&w)
	w.WriteString(rep.curveSection())
	rep.writeFailures(&w)
	return w.String()
}

// printer is fmt.Fprintf to w.
func printer(w *strings.Builder) func(format string, args ...any) {
	return func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
}

// writeHeader writes the title, the run's settings and machine, and what
// each scenario is and what its returned COMMIT survives.
func (rep *report) writeHeader(w *strings.Builder) {
	cfg := rep.b.cfg
	p := printer(w)
	p("# sysbench: MariaDB on pbfs against semi-synchronous replication\n\n")
	p("- date: %s UTC, %s (%d scenario(s) run)\n", rep.start.UTC().Format("2006-01-02 15:04"), rep.end.Sub(rep.start).Round(time.Second), len(cfg.scenarios))
	p("- command: `%s`\n", strings.TrimSpace("go run ./benchmarks/sysbench "+benchproc.ShownArgs(cfg.args)))
	p("- commit: `%s`; %s\n", rep.b.commit, rep.b.binNote)
	p("- machine: %s; at the start: load average %s, %d other FUSE mounts\n", machine(), rep.loadStart, rep.otherFUSE)
	p("- work directory: %s (%s)\n", cfg.workdir, rep.plainFS)
	p("- machine at start: %s\n- machine at end: %s\n", rep.cal[0], rep.cal[1])
	p("- %s; %s\n", firstLine(mariadbd, "--version"), firstLine("/usr/bin/sysbench", "--version"))
	if len(cfg.mountArgs) > 0 {
		p("- every pbfs mount also had `%s`\n", strings.Join(cfg.mountArgs, " "))
	}
	p("- sysbench: %d tables of %d rows, %d threads, %s per run, `--report-interval=5 --percentile=99 --histogram=on`; "+
		"each run follows its own `prepare` (fresh tables) and is followed by `cleanup`\n", cfg.tables, cfg.rows, cfg.threads, cfg.duration)
	p("- every mariadbd: `--no-defaults --user=root --skip-name-resolve`, socket and pid file outside the data directory, %s, "+
		"otherwise the server's defaults (innodb_flush_log_at_trx_commit=1, innodb_flush_method=O_DIRECT, innodb_doublewrite=1, no binary log)\n\n",
		strings.Join(baseOptions, ", "))
	p("%s", "Scenarios: **plain** the data directory on the work directory's file system; **pbfs-0** on a `pbfs mount --journal J VOL` "+
		"with no backups; **pbfs-2-replicated** on a mount with two `pbfs backup` processes, `--ack all` and "+
		"`--plugin mysql=mysql-hint --plugin-config mysql:fsync=replicated` (every fsync of the data directory, the redo log's included, "+
		"returns once everything written before it is durable on both backups); **pbfs-1-replicated** the same with one backup; **pbfs-2-replicated-delay** the same with "+
		report_.LinkDelay.String()+" added each way on every backup's link; **pbfs-2-replicated-memory** the same with `--ack-level memory` "+
		"(a backup acks a batch once it has received and checked it, before its synced append: safe against one machine's crash, not against a power loss of all); "+
		"**pbfs-2-ack1**, when run, the same with `--ack 1` "+
		"(durable on one backup); **pbfs-2-ack1-memory** the same with `--ack 1 --ack-level memory` "+
		"(a COMMIT returns once one backup has received and checked it: semi-sync's guarantee); **semisync** a primary with `"+
		strings.Join(primaryOptions, " ")+"` and two replicas with `"+strings.Join(replicaOptions, " ")+
		"` (a COMMIT returns once the primary has synced it to its binary log and one replica has received it into its relay log, "+
		"which it does not sync). All processes share this machine.\n\n")
	p("%s", "What a returned COMMIT survives: pbfs-2-replicated the loss of any two machines, power included (both backups synced it); "+
		"pbfs-1-replicated and pbfs-2-ack1 the loss of the primary, power included (one backup synced it); "+
		"pbfs-2-replicated-memory the crash of any two machines and pbfs-2-ack1-memory of any one (received and checked, not synced, by two or one backup), "+
		"neither a power loss of all; semisync the crash of any one machine and a power loss of all (the primary synced its binary log, "+
		"one replica received the events, unsynced), not the loss of the primary's disk with a replica's crash.\n\n")
}

// writeResults writes each workload's scenarios, with their ratio to the
// workload's plain run.
func (rep *report) writeResults(w *strings.Builder) {
	cfg := rep.b.cfg
	p := printer(w)
	p("## Results\n\n")
	p("| workload | scenario | tps | ÷ plain | p50 ms | p95 ms | p99 ms | max ms | tps per 5 s, min–max | errors/s | shipped B/tx | written B/tx | fsync barriers/tx, mean ms |\n")
	p("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|\n")
	for _, wl := range cfg.workloads {
		var plain *row
		for _, r := range rep.rows {
			if r.workload == wl && r.scenario == "plain" && r.failed == "" {
				plain = r
			}
		}
		for _, r := range rep.rows {
			if r.workload == wl {
				p("%s\n", r.cells(wl, plain))
			}
		}
	}
	p("\nshipped B/tx: pbfs-2-replicated, the encoded batch bytes sent to each backup (`pbfs_replicate_bytes_sent_total`, per backup); " +
		"pbfs-0, what the journal stored (`pbfs_journal_bytes_total{stage=\"stored\"}`, what a backup would be sent); " +
		"semisync, the growth of the primary's binary logs (`SHOW BINARY LOGS`), which each replica receives. " +
		"written B/tx: what the server wrote through the mount (`pbfs_capture_write_bytes_total`). " +
		"fsync barriers: the replicated fsyncs (`pbfs_fs_fsync_barrier_seconds`) per transaction, and their mean time; ack wait: " +
		"the mean time from the primary's journal commit until the ack set held the batch (`pbfs_replicate_barrier_seconds`). " +
		"Latency percentiles come from sysbench's histogram; its own 99th-percentile line agrees within a bucket.\n\n")
}

// writeTune writes the runs with one mysql-hint setting changed, against
// the first baseline.
func (rep *report) writeTune(w *strings.Builder) {
	p := printer(w)
	p("## What the settings mysql-hint comments on are worth (pbfs-2-replicated, oltp_write_only)\n\n")
	p("A fresh pbfs-2-replicated cluster; the server restarted with one setting changed for each run, the baseline (Debian's defaults: innodb_doublewrite=1, innodb_flush_log_at_trx_commit=1, innodb_flush_method=O_DIRECT) first and last.\n\n")
	p("| variant | tps | ÷ first baseline | p50 ms | p95 ms | p99 ms | shipped B/tx | written B/tx | fsync barriers/tx, mean ms |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	var base *row
	if rep.tune[0].failed == "" {
		base = rep.tune[0]
	}
	for _, r := range rep.tune {
		p("%s\n", r.tuneCells(base))
	}
	p("\n")
}

// writeCPU writes where each run's CPU went.
func writeCPU(w *strings.Builder, all []*row) {
	p := printer(w)
	p("## Where the CPU went\n\n")
	p("vCPUs busy over each run (CPU seconds per second, of %d): the whole machine from /proc/stat, the benchmark's processes "+
		"from /proc/PID/stat (mariadbd: every server of the scenario, the replicas included; pbfs mount; the two pbfs backups together), "+
		"and what is left, which is other work on the machine (and the kernel's work not charged to a process).\n\n", runtime.NumCPU())
	p("| workload | scenario | machine | mariadbd | pbfs mount | pbfs backups | sysbench | other | mount + backups, CPU ms/tx |\n")
	p("|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range all {
		u := r.r.cpu
		perTx := "–"
		if u.mount > 0 && r.r.tps > 0 {
			perTx = fmt.Sprintf("%.2f", 1000*(u.mount+u.backups)/r.r.tps)
		}
		p("| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n", r.workload, r.scenario, u.machine, u.mariadbd, u.mount, u.backups, u.sysbench, u.other(), perTx)
	}
	p("\n")
}

// writeChecks writes the checks of each scenario and run, and
// mysql-hint's findings at the first mount that has them.
func (rep *report) writeChecks(w *strings.Builder) {
	cfg := rep.b.cfg
	p := printer(w)
	p("## Checks\n\n")
	for _, s := range append(slices.Clone(cfg.scenarios), "tune") {
		for _, c := range rep.checks[s] {
			p("- %s: %s\n", s, c)
		}
	}
	for _, r := range append(slices.Clone(rep.rows), rep.tune...) {
		for _, c := range r.checks {
			p("- %s %s: %s\n", r.scenario, r.workload, c)
		}
	}
	for _, name := range []string{"pbfs-2-replicated", "pbfs-2-ack1", "pbfs-2-ack1-memory", "tune"} {
		if f := rep.findings[name]; len(f) > 0 {
			p("\nmysql-hint's findings at the %s mount's start (from the server's options, given to it as `defaults-file`):\n\n", name)
			for _, ev := range f {
				p("- `%s=%s`: %s\n", ev["setting"], ev["value"], ev["finding"])
			}
			break
		}
	}
}

// writeFailures writes the failed runs and the pbfs log lines above INFO.
func (rep *report) writeFailures(w *strings.Builder) {
	p := printer(w)
	p("\n## Failures and warnings\n\n")
	if len(rep.failures) == 0 {
		p("No run failed.\n")
	}
	for _, f := range rep.failures {
		p("- FAILED %s\n", strings.ReplaceAll(f, "\n", "\n  "))
	}
	for _, r := range append(slices.Clone(rep.rows), rep.tune...) {
		if r.failed != "" {
			p("- FAILED %s %s: %s\n", r.scenario, r.workload, strings.ReplaceAll(r.failed, "\n", "\n  "))
		}
	}
	if len(rep.complaints) > 0 {
		p("\npbfs log lines above INFO (%d):\n\n```\n", len(rep.complaints))
		for i, c := range rep.complaints {
			if i == 30 {
				p("... and %d more\n", len(rep.complaints)-30)
				break
			}
			p("%s\n", c)
		}
		p("```\n")
	}
}

func (r *row) cells(wl string, plain *row) string {
	name := r.scenario
	if r.failed != "" {
		name += " **FAILED**"
	}
	ratio := "–"
	if plain != nil && plain.r.tps > 0 && r.r.tps > 0 {
		ratio = fmt.Sprintf("%.2f", r.r.tps/plain.r.tps)
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |", wl, name, num(r.r.tps), ratio, r.latencies(), r.spread(), r.bytes())
}

func (r *row) tuneCells(base *row) string {
	name := r.scenario
	if r.failed != "" {
		name += " **FAILED**"
	}
	ratio := "–"
	if base != nil && r.r.tps > 0 {
		ratio = fmt.Sprintf("%.2f", r.r.tps/base.r.tps)
	}
	lat := fmt.Sprintf("%.2f | %.2f | %.2f", r.r.p50, r.r.p95, r.r.p99)
	return fmt.Sprintf("| %s | %s | %s | %s | %s |", name, num(r.r.tps), ratio, lat, r.bytes())
}

func (r *row) latencies() string {
	return fmt.Sprintf("%.2f | %.2f | %.2f | %.1f", r.r.p50, r.r.p95, r.r.p99, r.r.maxLat)
}

func (r *row) spread() string {
	iv := "–"
	if len(r.r.intervalTPS) > 0 {
		iv = fmt.Sprintf("%s–%s", num(slices.Min(r.r.intervalTPS)), num(slices.Max(r.r.intervalTPS)))
	}
	return fmt.Sprintf("%s | %.2f", iv, r.r.errPerSec)
}

// bytes: shipped and written bytes per transaction, and fsync barriers.
func (r *row) bytes() string {
	switch {
	case r.pbfs:
		shipped := r.d[`pbfs_journal_bytes_total{stage="stored"}`]
		if r.backups > 0 {
			shipped = r.d["pbfs_replicate_bytes_sent_total"] / float64(r.backups)
		}
		bar := "–"
		if n := r.d["pbfs_fs_fsync_barrier_seconds_count"]; n > 0 {
			bar = fmt.Sprintf("%.2f, %.2f", r.perTx(n), 1000*r.d["pbfs_fs_fsync_barrier_seconds_sum"]/n)
			if a := r.d["pbfs_replicate_barrier_seconds_count"]; a > 0 {
				bar += fmt.Sprintf(" (ack wait %.2f)", 1000*r.d["pbfs_replicate_barrier_seconds_sum"]/a)
			}
		}
		return fmt.Sprintf("%s | %s | %s", num(r.perTx(shipped)), num(r.perTx(r.d["pbfs_capture_write_bytes_total"])), bar)
	case r.binlog > 0:
		return fmt.Sprintf("%s (binlog) | – | –", num(r.perTx(float64(r.binlog))))
	}
	return "– | – | –"
}

// num prints a number with thousands separators, no decimals above 100.
func num(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	s := fmt.Sprintf("%.0f", v)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		fmt.Sscanf(strings.TrimPrefix(strings.SplitN(string(data), "\n", 2)[0], "MemTotal:"), "%d", &kb)
		mem = fmt.Sprintf(", %.0f GiB RAM", float64(kb)/(1<<20))
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	load, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("%d vCPU (%s)%s, Linux %s, load average at the end %s", runtime.NumCPU(), model, mem,
		strings.TrimSpace(string(kernel)), strings.Join(strings.Fields(string(load))[:3], " "))
}

func firstLine(argv ...string) string {
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		return argv[0] + ": " + err.Error()
	}
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}

// curveSection tables the open-loop runs (sysbench --rate) of every row
// that has them.
func (rep *report) curveSection() string {
	var b strings.Builder
	for _, r := range rep.rows {
		for _, pt := range r.r.curve {
			if b.Len() == 0 {
				b.WriteString("\n## Latency against offered load\n\nAfter each run, sysbench `--rate` at fractions of plain's tps for the same workload (latency as sysbench reports it in that mode). \"overloaded\": sysbench's event queue overflowed, the scenario could not take that rate.\n\n")
				b.WriteString("| workload | scenario | offered tps | tps | p50 ms | p95 ms | p99 ms |\n|---|---|---:|---:|---:|---:|---:|\n")
			}
			if pt.overloaded {
				fmt.Fprintf(&b, "| %s | %s | %.0f | overloaded | | | |\n", r.workload, r.scenario, pt.offered)
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f | %.2f | %.2f | %.2f |\n", r.workload, r.scenario, pt.offered, pt.tps, pt.p50, pt.p95, pt.p99)
		}
	}
	return b.String()
}
