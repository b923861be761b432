// Command commitpath counts, from a kernel trace, every wake-up and system
// call in series on a replicated commit: a 4 KiB pwrite and fdatasync on
// a mount with --fsync replicated and N backups (a database's commit),
// from the writer entering fdatasync until it returns. It starts the
// cluster, measures the commit's latency untraced, then records one
// stretch of commits with `perf record` (scheduler and system call
// tracepoints on every CPU) and walks each commit's critical path back
// from its end: who woke the writer, who woke that thread, and so on. Run
// from the module root as root, after make build:
//
//	go run ./benchmarks/commitpath              # two backups
//	go run ./benchmarks/commitpath -backups 1 -gap 5ms
//
// Tracing slows every step; the counts, not the traced latencies, are
// what the report is for.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/cluster"
	"github.com/pbfs/pbfs/benchmarks/internal/prologue"
)

type config struct {
	bin, workdir, ackLevel string
	backups, size          int
	gap, traced, untraced  time.Duration
	keep                   bool
}

func main() {
	var cfg config
	flag.StringVar(&cfg.bin, "bin", "bin/pbfs", "pbfs binary")
	flag.IntVar(&cfg.backups, "backups", 2, "backups (--ack all)")
	flag.StringVar(&cfg.ackLevel, "ack-level", "", "the mount's --ack-level (empty: its default, disk)")
	flag.IntVar(&cfg.size, "size", 4096, "bytes written before each fdatasync")
	flag.DurationVar(&cfg.gap, "gap", 0, "pause between commits (0: back to back, as the replicate benchmark's -via fsync)")
	flag.DurationVar(&cfg.untraced, "untraced", 3*time.Second, "how long commits run untraced, for their latency")
	flag.DurationVar(&cfg.traced, "traced", time.Second, "how long perf records")
	flag.StringVar(&cfg.workdir, "workdir", "/var/tmp", "where the run's directory is made (not a tmpfs)")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the run's directory (logs, journals, the trace)")
	flag.Parse()
	if _, err := prologue.Workdir(cfg.workdir); err != nil {
		prologue.Usage("commitpath", err)
	}
	if _, err := exec.LookPath("perf"); err != nil {
		prologue.Usage("commitpath", fmt.Errorf("perf is not installed (apt-get install linux-perf): %w", err))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	prologue.Exit("commitpath", run(ctx, cfg))
}

func run(ctx context.Context, cfg config) (err error) {
	dir, err := os.MkdirTemp(cfg.workdir, "pbfs-commitpath-")
	if err != nil {
		return err
	}
	var tok [16]byte
	rand.Read(tok[:])
	c, err := cluster.Start(ctx, cluster.Config{Bin: cfg.bin, Dir: dir, Vol: filepath.Join(dir, "vol"), Backups: cfg.backups,
		AckLevel: cfg.ackLevel, Env: []string{"PBFS_TOKEN=" + hex.EncodeToString(tok[:])}, Args: []string{"--fsync", "replicated"}})
	defer func() {
		if serr := c.Stop(); err == nil {
			err = serr
		}
		if err == nil && !cfg.keep {
			os.RemoveAll(dir)
		} else {
			fmt.Fprintln(os.Stderr, "commitpath: the run's directory is kept:", dir)
		}
	}()
	if err != nil {
		return err
	}
	w, err := startWriter(filepath.Join(c.Vol, "data"), cfg.size, cfg.gap)
	if err != nil {
		return err
	}
	defer w.stop()
	untraced := w.latencies(ctx, cfg.untraced)
	traceFile := filepath.Join(dir, "perf.data")
	if err := record(ctx, traceFile, cfg.traced); err != nil {
		return err
	}
	evs, err := script(traceFile)
	if err != nil {
		return err
	}
	roles := newRoles(os.Getpid(), c)
	tr := newTracer(evs, roles.of)
	commits := tr.commits(w.tid)
	if len(commits) == 0 {
		return fmt.Errorf("the trace holds no whole commit of the writer (thread %d)", w.tid)
	}
	for i := range commits {
		tr.walk(&commits[i], w.tid)
	}
	fmt.Print(report(cfg, untraced, commits))
	return nil
}

// record runs perf record on every CPU for d while the writer commits.
func record(ctx context.Context, file string, d time.Duration) error {
	cmd := exec.CommandContext(ctx, "perf", "record", "-q", "-a", "-o", file,
		"-e", "sched:sched_switch", "-e", "sched:sched_waking", "-e", "raw_syscalls:sys_enter", "-e", "raw_syscalls:sys_exit",
		"--", "sleep", fmt.Sprintf("%.3f", d.Seconds()))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("perf record: %w\n%s", err, out)
	}
	return nil
}

// script turns the recording into events.
func script(file string) ([]event, error) {
	cmd := exec.Command("perf", "script", "-i", file, "-F", "comm,pid,tid,cpu,time,event,trace")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	evs, perr := parseTrace(out)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("perf script: %w\n%s", err, stderr.String())
	}
	return evs, perr
}
