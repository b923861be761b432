// Command resync measures three things about replication that the
// replication issues ask for:
//
//  1. Resync pause and cost. It builds a volume of about 20,000 files in a
//     few hundred directories (about 500 MB: a few large files, many small
//     ones), starts a primary on it with a writer process writing through
//     the mount, then starts a backup whose volume and journal are empty.
//     The primary resyncs it from a snapshot while the writer keeps
//     writing. It reports the pause (from the log and from
//     pbfs_replicate_resync_pause_seconds), the resync's duration, the
//     bytes on the wire against the volume's size, and checks after a
//     final barrier that the backup equals the primary. Then the
//     "mostly-correct copy": the backup is stopped, about 1 % of its files
//     are changed behind its back, it is restarted and `pbfs resync` is run;
//     the same numbers again.
//  2. Journal disk use under a long write load: a primary with one backup
//     and a steady writer for a few minutes with a short retention window
//     (--retain 5s --retain-max 60s on the primary, --retain 5s on the
//     backup), sampling both journal directories' size every few seconds.
//  3. A deposed primary rejoining (-parts rejoin): a volume of 30,000 files,
//     a primary killed with -9 after writing what its backup never got, the
//     backup promoted, the old primary back as its backup. It times the
//     rejoin's resync (a targeted one) and then a `pbfs resync` of the same
//     backup (a full one, as every rejoin was before).
//
// Every primary and backup is a real `pbfs` process; the writer is this
// program re-executed. Run from the module root, as root, with /dev/fuse:
//
//	go run ./benchmarks/resync            # about 6 minutes with the defaults
//	go run ./benchmarks/resync -h         # the settings
//
// Everything lives in a fresh directory under -workdir (default /var/tmp);
// every process is stopped and every mount removed at the end, on failure
// and on Ctrl-C too.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/prologue"
	"github.com/pbfs/pbfs/control"
)

type config struct {
	bin, workdir, resultsDir string
	keep                     bool
	parts                    string

	files, dirs int
	mb          int64

	rejoinFiles int
	rejoinMB    int64
	seed        uint64
	rate        int
	tick        time.Duration
	barrierGap  time.Duration
	warm, after time.Duration
	alter       float64
	alterWriter bool

	diskDuration, diskSample, diskTail time.Duration
	diskRate                           int
	diskMB                             int64
	retain, retainMax, backupRetain    time.Duration
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "writer" {
		writerMain(os.Args[2:])
		return
	}
	var cfg config
	flag.StringVar(&cfg.bin, "bin", os.Getenv("PBFS_BIN"), "pbfs binary under test (default $PBFS_BIN, else built from this module into the run directory)")
	flag.StringVar(&cfg.workdir, "workdir", "/var/tmp", "where the run's directory is created (never under the repository)")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the run's directory (logs, journals, volumes); a failed run always keeps it")
	flag.StringVar(&cfg.resultsDir, "results-dir", "benchmarks/results", "where the report is written as resync-<UTC date>.md (empty: stdout only)")
	flag.StringVar(&cfg.parts, "parts", "resync,disk", "which parts to run: resync, disk, rejoin, comma-separated")
	flag.IntVar(&cfg.rejoinFiles, "rejoin-files", 30000, "part 3: regular files in the volume")
	flag.Int64Var(&cfg.rejoinMB, "rejoin-mb", 300, "part 3: volume size in MB (10^6 bytes)")
	flag.IntVar(&cfg.files, "files", 20000, "part 1: regular files in the volume")
	flag.IntVar(&cfg.dirs, "dirs", 300, "part 1: leaf directories")
	flag.Int64Var(&cfg.mb, "mb", 500, "part 1: volume size in MB (10^6 bytes)")
	flag.Uint64Var(&cfg.seed, "seed", 1, "seed of the volume, the alterations and the writer")
	flag.IntVar(&cfg.rate, "rate", 1<<20, "part 1: writer bytes per second")
	flag.DurationVar(&cfg.tick, "tick", 20*time.Millisecond, "writer: time between write rounds")
	flag.DurationVar(&cfg.barrierGap, "barrier-every", 20*time.Millisecond, "writer: least time between barrier starts (closed loop)")
	flag.DurationVar(&cfg.warm, "warm", 3*time.Second, "part 1: writer time before the backup starts (and before pbfs resync)")
	flag.DurationVar(&cfg.after, "after", 5*time.Second, "part 1: writer time after each resync is done")
	flag.Float64Var(&cfg.alter, "alter", 0.01, "part 1: fraction of the backup's files changed behind its back")
	flag.BoolVar(&cfg.alterWriter, "alter-writer", true, "part 1: run the writer during the second resync too (false: only the alterations differ)")
	flag.DurationVar(&cfg.diskDuration, "disk-duration", 150*time.Second, "part 2: how long the writer runs")
	flag.DurationVar(&cfg.diskSample, "disk-sample", 5*time.Second, "part 2: time between journal size samples")
	flag.DurationVar(&cfg.diskTail, "disk-tail", 20*time.Second, "part 2: sampling after the writer stops")
	flag.IntVar(&cfg.diskRate, "disk-rate", 3<<20, "part 2: writer bytes per second")
	flag.Int64Var(&cfg.diskMB, "disk-mb", 64, "part 2: size of the writer's db files in MB, together")
	flag.DurationVar(&cfg.retain, "retain", 5*time.Second, "part 2: primary --retain")
	flag.DurationVar(&cfg.retainMax, "retain-max", 60*time.Second, "part 2: primary --retain-max")
	flag.DurationVar(&cfg.backupRetain, "backup-retain", 5*time.Second, "part 2: backup --retain")
	flag.Parse()
	prologue.Exit("resync", run(cfg))
}

// env is what every part shares.
type env struct {
	cfg    config
	bin    string
	runDir string
	token  string
	rep    *report
	live   []func() error // stop functions of what is running, newest last
}

func (e *env) onStop(f func() error) { e.live = append(e.live, f) }

// stopAll stops everything still running, newest first.
func (e *env) stopAll() error {
	var list []error
	for i := len(e.live) - 1; i >= 0; i-- {
		list = append(list, e.live[i]())
	}
	e.live = nil
	return errors.Join(list...)
}

func run(cfg config) (err error) {
	r, err := prologue.Begin("resync", cfg.workdir, "pbfs-resync.")
	if err != nil {
		return err
	}
	ctx, runDir := r.Ctx, r.Dir
	e := &env{cfg: cfg, runDir: runDir}
	defer func() {
		if serr := e.stopAll(); serr != nil {
			err = errors.Join(err, serr)
		}
		r.End(&err, cfg.keep)
	}()
	var commit string
	if e.bin, commit, err = r.Binary(cfg.bin); err != nil {
		return err
	}
	e.token = prologue.Token()
	e.rep = &report{cfg: cfg, commit: commit, start: time.Now(), loadStart: benchproc.LoadAvg(), otherMounts: prologue.PbfsMounts()}
	go e.rep.watchLoad(ctx)

	if strings.Contains(cfg.parts, "resync") {
		if err := partResync(ctx, e); err != nil {
			return fmt.Errorf("part 1 (resync): %w", err)
		}
		if err := e.stopAll(); err != nil {
			return err
		}
		if !cfg.keep {
			os.RemoveAll(filepath.Join(runDir, "resync")) // 1 GB of volumes part 2 does not need
		}
	}
	if strings.Contains(cfg.parts, "disk") {
		if err := partDisk(ctx, e); err != nil {
			return fmt.Errorf("part 2 (disk): %w", err)
		}
		if err := e.stopAll(); err != nil {
			return err
		}
	}
	if strings.Contains(cfg.parts, "rejoin") {
		if err := partRejoin(ctx, e); err != nil {
			return fmt.Errorf("part 3 (rejoin): %w", err)
		}
		if err := e.stopAll(); err != nil {
			return err
		}
	}
	e.rep.end = time.Now()
	e.rep.loadEnd = benchproc.LoadAvg()
	e.rep.leftMounts = mountsUnder(runDir)
	md := e.rep.markdown()
	fmt.Print(md)
	if cfg.resultsDir != "" {
		if _, err := prologue.WriteReport(cfg.resultsDir, "resync", e.rep.start, md); err != nil {
			return err
		}
	}
	return nil
}

// node of the cluster: a primary or a backup process.
func (e *env) startBackup(ctx context.Context, name, dir, addr, vol, jdir string, extra ...string) (*proc, error) {
	argv := append([]string{e.bin, "backup", "--listen", addr, "--journal", jdir}, extra...)
	argv = append(argv, vol)
	p, err := startProc(name, filepath.Join(dir, name+".log"), []string{"PBFS_TOKEN=" + e.token}, argv...)
	if err != nil {
		return nil, err
	}
	e.onStop(func() error { return p.Stop(30 * time.Second) })
	return p, waitListening(ctx, p, addr)
}

func (e *env) startPrimary(ctx context.Context, name, dir, vol, jdir string, args ...string) (*proc, *control.Client, error) {
	return e.startCmd(ctx, name, "mount", dir, vol, jdir, args...)
}

// startCmd starts a command that serves a mount at vol (mount, promote)
// and waits until it does; at the end it is stopped, and vol must be
// unmounted by then.
func (e *env) startCmd(ctx context.Context, name, cmd, dir, vol, jdir string, args ...string) (*proc, *control.Client, error) {
	argv := append([]string{e.bin, cmd, "--journal", jdir}, args...)
	argv = append(argv, vol)
	p, err := startProc(name, filepath.Join(dir, name+".log"), []string{"PBFS_TOKEN=" + e.token}, argv...)
	if err != nil {
		return nil, nil, err
	}
	e.onStop(func() error {
		err := p.Stop(60 * time.Second)
		if mounted(vol) {
			syscall.Unmount(vol, syscall.MNT_DETACH)
			err = errors.Join(err, fmt.Errorf("%s still mounted after %s stopped; detached", vol, name))
		}
		return err
	})
	cl, err := waitMounted(ctx, p, vol, jdir)
	return p, cl, err
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
