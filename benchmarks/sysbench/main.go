// Command sysbench measures MariaDB under sysbench on pbfs against
// MariaDB's own semi-synchronous replication, all on this machine:
// oltp_write_only and oltp_insert (4 tables, 4 threads by default) with
// the data directory on a plain directory (plain), on a pbfs mount with
// no backups (pbfs-0), on a pbfs mount replicating to two backups with
// --ack all and the mysql-hint plugin's fsync=replicated policy
// (pbfs-2-replicated: the redo log's fsync is a barrier, so a COMMIT
// returns once it is durable on both backups; pbfs-1-replicated: the same
// with one backup), the same with 0.5 ms added
// each way on every backup's link (pbfs-2-replicated-delay, through
// benchmarks/internal/delayproxy), the same with --ack-level memory
// (pbfs-2-replicated-memory: a backup acks a batch once received and
// checked, before its synced append), and with two semi-sync replicas
// (semisync), and pbfs-2-ack1-memory, pbfs-2-replicated with --ack 1
// --ack-level memory: a COMMIT returns once one backup has received and
// checked it, semi-sync's own guarantee (AFTER_SYNC waits for one replica
// to receive the events into its unsynced relay log); -scenarios can add
// pbfs-2-ack1 (--ack 1 at the disk level) and pbfs-2-replicated-delay. It then runs
// oltp_write_only on pbfs-2-replicated with each of the settings the
// mysql-hint plugin comments on changed in turn (innodb_doublewrite,
// innodb_flush_log_at_trx_commit, innodb_flush_method).
//
// Before reporting it checks that the backups hold the data (acked seq =
// last seq after each run, the same files at the end) and that semi-sync
// stayed on (yes-transactions grew, no-transactions did not, the replicas'
// tables equal the primary's); a run that fails a check is reported as
// failed.
//
// Every mariadbd, pbfs mount and pbfs backup is a real process. Run from
// the module root, as root, with mariadb-server and sysbench installed:
//
//	go run ./benchmarks/sysbench            # 30 s per run, 50,000 rows per table: about 12 minutes
//	go run ./benchmarks/sysbench -quick     # 10 s per run, 10,000 rows: about 5 minutes
//	go run ./benchmarks/sysbench -h         # the settings
//
// The report goes to benchmarks/results/sysbench-<UTC date>.md and to
// stdout. Everything lives in a fresh directory under -workdir (default
// /var/tmp, which must not be a tmpfs); every process is stopped and every
// mount removed at the end, on failure and on Ctrl-C too.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/prologue"
)

type config struct {
	bin, hint  string
	duration   time.Duration
	rows       int
	tables     int
	threads    int
	quick      bool
	scenarios  []string
	workloads  []string
	tune       bool
	workdir    string
	keep       bool
	resultsDir string
	mountArgs  []string
	args       []string
	fractions  []float64 // open-loop rates after each run, as fractions of plain's tps
}

// allScenarios can be run; the default list leaves out pbfs-2-ack1
// (pbfs-2-replicated with --ack 1: a barrier waits for one backup's
// synced append) and pbfs-2-replicated-delay. The two that answer
// "pbfs against semi-sync" are pbfs-2-replicated (every commit synced on
// both backups: more than semi-sync gives) and pbfs-2-ack1-memory (one
// backup has received and checked it: what semi-sync gives).
var (
	allScenarios     = []string{"plain", "pbfs-0", "pbfs-1-replicated", "pbfs-2-replicated", "pbfs-2-replicated-delay", "pbfs-2-replicated-memory", "pbfs-2-ack1", "pbfs-2-ack1-memory", "semisync"}
	defaultScenarios = []string{"plain", "pbfs-0", "pbfs-1-replicated", "pbfs-2-replicated", "pbfs-2-replicated-memory", "pbfs-2-ack1-memory", "semisync"}
)

func main() {
	var cfg config
	var scen, work string
	flag.StringVar(&cfg.bin, "bin", os.Getenv("PBFS_BIN"), "pbfs binary under test (default $PBFS_BIN, else built from this module into the run directory)")
	flag.StringVar(&cfg.hint, "hint", os.Getenv("PBFS_MYSQL_HINT"), "mysql-hint plugin binary (default $PBFS_MYSQL_HINT, else built from this module)")
	fractions := flag.String("fractions", "0.5,0.7,0.9", "after each run, runs at these fractions of plain's tps with sysbench --rate (latency against offered load); empty for none; -quick makes none")
	flag.BoolVar(&cfg.quick, "quick", envBool("SYSBENCH_QUICK"), "short runs: 10 s and 10,000 rows per table unless -time or -rows say otherwise (also SYSBENCH_QUICK=1)")
	flag.DurationVar(&cfg.duration, "time", envDuration("SYSBENCH_TIME", 30*time.Second), "length of each sysbench run (also SYSBENCH_TIME)")
	flag.IntVar(&cfg.rows, "rows", envInt("SYSBENCH_ROWS", 50000), "rows per table (also SYSBENCH_ROWS)")
	flag.IntVar(&cfg.tables, "tables", 4, "sysbench tables")
	flag.IntVar(&cfg.threads, "threads", 4, "sysbench client threads")
	flag.StringVar(&scen, "scenarios", strings.Join(defaultScenarios, ","), "scenarios to run, in order (plain is the baseline of every ratio; also pbfs-2-ack1, pbfs-2-replicated-delay)")
	flag.StringVar(&work, "workloads", "oltp_write_only,oltp_insert", "sysbench workloads")
	flag.BoolVar(&cfg.tune, "tune", !envBool("SYSBENCH_NO_TUNE"), "also run oltp_write_only on pbfs-2-replicated with each setting mysql-hint comments on changed (SYSBENCH_NO_TUNE=1 skips)")
	flag.StringVar(&cfg.workdir, "workdir", "/var/tmp", "where the run's directory is created: the real disk, never a tmpfs, never under the repository")
	mountArgs := flag.String("mount-args", "", "extra `flags` for every pbfs mount, space-separated (e.g. --write-diff)")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the run's directory (logs, data directories, journals); a failed run always keeps it")
	flag.StringVar(&cfg.resultsDir, "results-dir", "benchmarks/results", "where the report is written as sysbench-<UTC date>.md (empty: stdout only)")
	flag.Parse()
	cfg.args = os.Args[1:]
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.quick && !set["fractions"] {
		*fractions = ""
	}
	for _, f := range strings.Split(*fractions, ",") {
		if f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 || v > 2 {
			fmt.Fprintf(os.Stderr, "sysbench: -fractions: %q\n", f)
			os.Exit(2)
		}
		cfg.fractions = append(cfg.fractions, v)
	}
	if cfg.quick {
		if !set["time"] && os.Getenv("SYSBENCH_TIME") == "" {
			cfg.duration = 10 * time.Second
		}
		if !set["rows"] && os.Getenv("SYSBENCH_ROWS") == "" {
			cfg.rows = 10000
		}
	}
	cfg.mountArgs = strings.Fields(*mountArgs)
	cfg.scenarios = splitList(scen)
	cfg.workloads = splitList(work)
	var err error
	for _, s := range cfg.scenarios {
		if !slices.Contains(allScenarios, s) {
			err = fmt.Errorf("-scenarios: unknown %q (want some of %s)", s, strings.Join(allScenarios, ","))
		}
	}
	for _, w := range cfg.workloads {
		if _, e := os.Stat(filepath.Join("/usr/share/sysbench", w+".lua")); e != nil {
			err = fmt.Errorf("-workloads: %q is not a sysbench script: %w", w, e)
		}
	}
	if cfg.duration < time.Second || cfg.rows < 1 || cfg.tables < 1 || cfg.threads < 1 {
		err = errors.Join(err, fmt.Errorf("-time, -rows, -tables, -threads must be positive (-time at least 1s)"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sysbench:", err)
		os.Exit(2)
	}
	prologue.Exit("sysbench", run(cfg))
}

// bench is one run: its directory, binaries and everything it started.
type bench struct {
	cfg      config
	ctx      context.Context
	runDir   string
	bin      string
	hint     string
	token    string
	commit   string
	binNote  string
	servers  []*server  // running mariadbd, stopped first at cleanup
	clusters []*cluster // running pbfs mounts and backups
	// sysbenchCPU is the CPU time of the last sysbench process.
	sysbenchCPU time.Duration
	rep         *report
	plainTPS    map[string]float64 // by workload, once plain ran
}

func run(cfg config) (err error) {
	if err := preflight(cfg); err != nil {
		return err
	}
	r, err := prologue.Begin("sysbench", cfg.workdir, "pbfs-sysbench.")
	if err != nil {
		return err
	}
	ctx, runDir := r.Ctx, r.Dir
	b := &bench{cfg: cfg, ctx: ctx, runDir: runDir, token: fmt.Sprintf("sb-%d-%d", os.Getpid(), time.Now().UnixNano()), plainTPS: map[string]float64{}}
	defer func() {
		if e := b.cleanup(); e != nil {
			err = errors.Join(err, e)
		}
		r.End(&err, cfg.keep)
	}()
	if err := b.build(); err != nil {
		return err
	}
	b.rep = newReport(b)
	b.rep.cal[0] = benchproc.Calibrate(runDir)
	for _, s := range cfg.scenarios {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(os.Stderr, "== %s\n", s)
		if e := b.scenario(s); e != nil {
			// A scenario that fails is reported as failed; the others still run.
			b.rep.failures = append(b.rep.failures, fmt.Sprintf("%s: %v", s, e))
			fmt.Fprintf(os.Stderr, "%s FAILED: %v\n", s, e)
			if e := b.cleanup(); e != nil {
				b.rep.failures = append(b.rep.failures, fmt.Sprintf("%s cleanup: %v", s, e))
			}
		}
	}
	if cfg.tune && slices.Contains(cfg.scenarios, "pbfs-2-replicated") {
		fmt.Fprintln(os.Stderr, "== tuning on pbfs-2-replicated")
		if e := b.tuning(); e != nil {
			b.rep.failures = append(b.rep.failures, fmt.Sprintf("tuning: %v", e))
			fmt.Fprintf(os.Stderr, "tuning FAILED: %v\n", e)
			b.cleanup()
		}
	}
	b.rep.end = time.Now()
	b.rep.cal[1] = benchproc.Calibrate(runDir)
	text := b.rep.markdown()
	fmt.Print(text)
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted, no report written: %w", ctx.Err())
	}
	if cfg.resultsDir != "" {
		if e := os.MkdirAll(cfg.resultsDir, 0o755); e != nil {
			return e
		}
		charts, e := b.rep.charts(cfg.resultsDir, prologue.Stem("sysbench", b.rep.start))
		if e != nil {
			return fmt.Errorf("draw charts: %w", e)
		}
		if _, e := prologue.WriteReport(cfg.resultsDir, "sysbench", b.rep.start, text+charts); e != nil {
			return e
		}
		if e := b.rep.summarize(cfg.resultsDir); e != nil {
			return fmt.Errorf("write summary: %w", e)
		}
	}
	if len(b.rep.failures) > 0 {
		return fmt.Errorf("%d failure(s), listed in the report", len(b.rep.failures))
	}
	return nil
}

// preflight checks the tools and root (prologue.Begin checks /dev/fuse
// and the work directory).
func preflight(cfg config) error {
	for _, p := range []string{mariadbd, installDB, mariadbClient, "/usr/bin/sysbench"} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("need %s (apt-get install mariadb-server sysbench): %w", p, err)
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("run as root: pbfs mounts need it")
	}
	return nil
}

func fsName(t int64) string { return prologue.FSName(t) }

// build builds pbfs and mysql-hint into the run directory unless pinned.
func (b *bench) build() error {
	b.commit = gitOut("rev-parse", "--short", "HEAD")
	if gitOut("status", "--porcelain", "--untracked-files=no") != "" {
		b.commit += " (working tree has uncommitted changes)"
	}
	b.bin, b.hint = b.cfg.bin, b.cfg.hint
	var notes []string
	for _, t := range []struct {
		dst  *string
		name string
		pkg  string
	}{{&b.bin, "pbfs", "./cmd/pbfs"}, {&b.hint, "mysql-hint", "./plugins/mysql-hint"}} {
		if *t.dst != "" {
			notes = append(notes, fmt.Sprintf("%s pinned (%s)", t.name, benchproc.ShownPath(*t.dst)))
			continue
		}
		*t.dst = filepath.Join(b.runDir, t.name)
		if out, err := exec.Command("go", "build", "-o", *t.dst, t.pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", t.pkg, err, out)
		}
		notes = append(notes, t.name+" built from the working tree")
	}
	b.binNote = strings.Join(notes, ", ")
	if b.cfg.bin == "" && b.cfg.hint == "" {
		b.binNote = "pbfs and mysql-hint built from the working tree"
	}
	return nil
}

// cleanup stops every mariadbd, then every pbfs mount and backup, and
// detaches any mount left under the run directory. It tries everything.
func (b *bench) cleanup() error {
	var errs []error
	for i := len(b.servers) - 1; i >= 0; i-- {
		if err := b.servers[i].stop(); err != nil {
			errs = append(errs, err)
		}
	}
	b.servers = nil
	for i := len(b.clusters) - 1; i >= 0; i-- {
		if err := b.clusters[i].stop(); err != nil {
			errs = append(errs, err)
		}
	}
	b.clusters = nil
	if left := benchproc.MountsUnder(b.runDir); len(left) > 0 {
		for _, m := range left {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
		errs = append(errs, fmt.Errorf("mounts left behind (now detached): %v", left))
	}
	return errors.Join(errs...)
}

func gitOut(args ...string) string {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func envBool(k string) bool { v, _ := strconv.ParseBool(os.Getenv(k)); return v }

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return def
}

func envDuration(k string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(k)); err == nil {
		return v
	}
	return def
}
