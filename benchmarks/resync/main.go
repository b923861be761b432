// Command resync measures two things about replication that the
// replication issue asks for:
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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/delayproxy"
	"github.com/pbfs/pbfs/control"
)

type config struct {
	bin, workdir, resultsDir string
	keep                     bool
	parts                    string

	files, dirs int
	mb          int64
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
	flag.StringVar(&cfg.parts, "parts", "resync,disk", "which parts to run: resync, disk or both")
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
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "resync: FAILED:", err)
		os.Exit(1)
	}
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
	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	if st, err := os.ReadFile("/proc/self/status"); err == nil && sigIgnored(string(st), syscall.SIGINT) {
		fmt.Fprintln(os.Stderr, "resync: started with SIGINT ignored (a background job of a non-interactive shell?): stop it with SIGTERM")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("no /dev/fuse: %w", err)
	}
	if wd, _ := os.Getwd(); wd != "" {
		if abs, _ := filepath.Abs(cfg.workdir); strings.HasPrefix(abs+"/", wd+"/") {
			return fmt.Errorf("-workdir %s is inside the current directory: use a scratch directory such as /var/tmp", cfg.workdir)
		}
	}
	runDir, err := os.MkdirTemp(cfg.workdir, "pbfs-resync.")
	if err != nil {
		return err
	}
	e := &env{cfg: cfg, runDir: runDir}
	defer func() {
		if serr := e.stopAll(); serr != nil {
			err = errors.Join(err, serr)
		}
		if left := mountsUnder(runDir); len(left) > 0 {
			for _, m := range left {
				syscall.Unmount(m, syscall.MNT_DETACH)
			}
			err = errors.Join(err, fmt.Errorf("mounts left behind (now detached): %v", left))
		}
		if err != nil || cfg.keep {
			fmt.Fprintln(os.Stderr, "resync: kept", runDir)
		} else {
			os.RemoveAll(runDir)
		}
	}()
	e.bin = cfg.bin
	commit := benchproc.Commit()
	if e.bin == "" {
		e.bin = filepath.Join(runDir, "pbfs")
		out, err := exec.Command("go", "build", "-o", e.bin, "github.com/pbfs/pbfs/cmd/pbfs").CombinedOutput()
		if err != nil {
			return fmt.Errorf("build pbfs: %v\n%s", err, out)
		}
	} else {
		commit = "(pinned binary " + benchproc.ShownPath(e.bin) + "; tree now at " + commit + ")"
	}
	tok := make([]byte, 16)
	rand.Read(tok)
	e.token = hex.EncodeToString(tok)
	e.rep = &report{cfg: cfg, commit: commit, start: time.Now(), loadStart: benchproc.LoadAvg(), otherMounts: countPbfsMounts()}
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
	e.rep.end = time.Now()
	e.rep.loadEnd = benchproc.LoadAvg()
	e.rep.leftMounts = mountsUnder(runDir)
	md := e.rep.markdown()
	fmt.Print(md)
	if cfg.resultsDir != "" {
		p := filepath.Join(cfg.resultsDir, "resync-"+e.rep.start.UTC().Format("2006-01-02-150405")+".md")
		if err := os.WriteFile(p, []byte(md), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "resync: report written to", p)
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
	argv := append([]string{e.bin, "mount", "--journal", jdir}, args...)
	argv = append(argv, vol)
	p, err := startProc(name, filepath.Join(dir, name+".log"), []string{"PBFS_TOKEN=" + e.token}, argv...)
	if err != nil {
		return nil, nil, err
	}
	e.onStop(func() error {
		err := p.Stop(60 * time.Second)
		if mounted(vol) {
			syscall.Unmount(vol, syscall.MNT_DETACH)
			err = errors.Join(err, fmt.Errorf("%s still mounted after the primary stopped; detached", vol))
		}
		return err
	})
	cl, err := waitMounted(ctx, p, vol, jdir)
	return p, cl, err
}

// resyncRun is one resync as the primary saw it, with the cost around it.
type resyncRun struct {
	name                string
	snapshot, done      map[string]string // the primary's log lines
	backupDone          map[string]string // the backup's log line
	pauseHist           histogram         // pbfs_replicate_resync_pause_seconds, increase over this resync
	wireUp, wireDown    int64             // proxy bytes from "snapshot taken" to "resync done"
	wall                time.Duration     // seen from the benchmark: trigger to done
	batchBytes, batches float64           // pbfs_replicate_bytes_sent_total / batches_sent_total over the phase
	writer              *writerStats
	cmp                 comparison
	cmpTime             time.Duration
	diffOut             string // diff -r's verdict
	alter               *alteration
}

type histogram struct {
	count, sum float64
	buckets    map[float64]float64 // le -> cumulative count
}

func histOf(m metrics, name string) histogram {
	h := histogram{count: m.sum(name+"_count", ""), sum: m.sum(name+"_sum", ""), buckets: map[float64]float64{}}
	for k, v := range m {
		if !strings.HasPrefix(k, name+"_bucket{") {
			continue
		}
		i := strings.Index(k, `le="`)
		if i < 0 {
			continue
		}
		le := k[i+4:]
		le = le[:strings.IndexByte(le, '"')]
		f, err := strconv.ParseFloat(le, 64)
		if err == nil {
			h.buckets[f] = v
		}
	}
	return h
}

func (h histogram) minus(o histogram) histogram {
	d := histogram{count: h.count - o.count, sum: h.sum - o.sum, buckets: map[float64]float64{}}
	for k, v := range h.buckets {
		d.buckets[k] = v - o.buckets[k]
	}
	return d
}

// bound is the smallest bucket bound holding every observation.
func (h histogram) bound() string {
	var les []float64
	for k := range h.buckets {
		les = append(les, k)
	}
	sort.Float64s(les)
	for _, le := range les {
		if h.buckets[le] >= h.count && h.count > 0 {
			if math.IsInf(le, 1) {
				return "+Inf"
			}
			return fmt.Sprintf("≤ %s ms", trimFloat(le*1e3))
		}
	}
	return "–"
}

func trimFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// partResync is part 1.
func partResync(ctx context.Context, e *env) error {
	cfg := e.cfg
	dir := filepath.Join(e.runDir, "resync")
	vol, bvol := filepath.Join(dir, "vol"), filepath.Join(dir, "bvol")
	jp, jb := filepath.Join(dir, "jp"), filepath.Join(dir, "jb")
	for _, d := range []string{vol, bvol} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	rep := e.rep
	fmt.Fprintf(os.Stderr, "part 1: building the volume (%d files, %d MB)\n", cfg.files, cfg.mb)
	t0 := time.Now()
	b, err := buildVolume(vol, volumeSpec{files: cfg.files, dirs: cfg.dirs, bytes: cfg.mb * 1e6, seed: cfg.seed})
	if err != nil {
		return fmt.Errorf("build volume: %w", err)
	}
	rep.built, rep.buildTime = b, time.Since(t0)

	baddr, err := freeAddr()
	if err != nil {
		return err
	}
	// A proxy with no delay counts the bytes each way: the TCP payload, so
	// gRPC and HTTP/2 framing are included.
	px, err := delayproxy.New("127.0.0.1:0", baddr, 0)
	if err != nil {
		return err
	}
	e.onStop(px.Close)
	// The primary starts first, with a backup that is not there yet, so the
	// writer is running when the backup arrives: the resync happens under
	// load, as it would for a backup added to a live service.
	primary, cl, err := e.startPrimary(ctx, "primary", dir, vol, jp, "--backup", px.Addr(), "--ack", "all")
	if err != nil {
		return err
	}
	wr, wstats, err := startWriter("writer1", dir, vol, jp, cfg.rate, cfg.tick, cfg.barrierGap, cfg.seed, b.dbFiles)
	if err != nil {
		return err
	}
	w := wr
	e.onStop(func() error { return w.Stop(30 * time.Second) })
	sleep(ctx, cfg.warm)
	m0, err := scrape(ctx, cl)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "part 1: starting the empty backup")
	r1 := &resyncRun{name: "new backup, empty volume and journal"}
	started := time.Now()
	backup, err := e.startBackup(ctx, "backup", dir, baddr, bvol, jb)
	if err != nil {
		return err
	}
	if err := r1.watch(ctx, primary, backup, px, 0, started); err != nil {
		return err
	}
	sleep(ctx, cfg.after)
	if r1.writer, err = stopWriter(wr, wstats); err != nil {
		return err
	}
	if err := r1.finish(ctx, cl, m0, vol, bvol); err != nil {
		return err
	}
	rep.resyncs = append(rep.resyncs, r1)
	if !r1.cmp.ok() {
		return fmt.Errorf("the backup differs from the primary after the first resync:\n%s", strings.Join(r1.cmp.diffs[:min(20, len(r1.cmp.diffs))], "\n"))
	}

	fmt.Fprintln(os.Stderr, "part 1: altering the stopped backup")
	if err := backup.Stop(30 * time.Second); err != nil {
		return err
	}
	a, err := alterBackup(bvol, cfg.alter, cfg.seed)
	if err != nil {
		return fmt.Errorf("alter the backup: %w", err)
	}
	if backup, err = e.startBackup(ctx, "backup", dir, baddr, bvol, jb); err != nil {
		return err
	}
	wr = nil
	if cfg.alterWriter {
		wr, wstats, err = startWriter("writer2", dir, vol, jp, cfg.rate, cfg.tick, cfg.barrierGap, cfg.seed+1, b.dbFiles)
		if err != nil {
			return err
		}
		w := wr
		e.onStop(func() error { return w.Stop(30 * time.Second) })
	}
	sleep(ctx, cfg.warm)
	if m0, err = scrape(ctx, cl); err != nil {
		return err
	}
	r2 := &resyncRun{name: fmt.Sprintf("mostly-correct copy (%.0f %% of files altered), `pbfs resync`", cfg.alter*100), alter: &a}
	if !cfg.alterWriter {
		r2.name += ", no writer"
	}
	started = time.Now()
	out, err := exec.Command(e.bin, "resync", "--journal", jp).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pbfs resync: %v: %s", err, out)
	}
	if err := r2.watch(ctx, primary, backup, px, 1, started); err != nil {
		return err
	}
	if wr != nil {
		sleep(ctx, cfg.after)
		if r2.writer, err = stopWriter(wr, wstats); err != nil {
			return err
		}
	}
	if err := r2.finish(ctx, cl, m0, vol, bvol); err != nil {
		return err
	}
	rep.resyncs = append(rep.resyncs, r2)
	rep.complaints = append(rep.complaints, primary.Complaints()...)
	rep.complaints = append(rep.complaints, backup.Complaints()...)
	if !r2.cmp.ok() {
		return fmt.Errorf("the backup differs from the primary after the second resync:\n%s", strings.Join(r2.cmp.diffs[:min(20, len(r2.cmp.diffs))], "\n"))
	}
	return nil
}

// watch waits for resync number n+1 and records the proxy's bytes between
// its snapshot and its end.
func (r *resyncRun) watch(ctx context.Context, primary, backup *proc, px *delayproxy.Proxy, n int, started time.Time) error {
	var err error
	if r.snapshot, err = primary.WaitEvent(ctx, "resync: snapshot taken", n, 2*time.Minute); err != nil {
		return err
	}
	up0, down0 := px.Bytes()
	if r.done, err = primary.WaitEvent(ctx, "resync done", n, 10*time.Minute); err != nil {
		return err
	}
	up1, down1 := px.Bytes()
	r.wall = time.Since(started)
	r.wireUp, r.wireDown = up1-up0, down1-down0
	ev := backup.LogEvents("resync done")
	if len(ev) > 0 {
		r.backupDone = ev[len(ev)-1]
	}
	fmt.Fprintf(os.Stderr, "  resync done: %v\n", r.done)
	return nil
}

// finish takes a final barrier, waits until the backup applied it, reads
// the metrics and compares the volumes.
func (r *resyncRun) finish(ctx context.Context, cl *control.Client, m0 metrics, vol, bvol string) error {
	if _, err := barrierApplied(ctx, cl, 2*time.Minute); err != nil {
		return err
	}
	m1, err := scrape(ctx, cl)
	if err != nil {
		return err
	}
	r.pauseHist = histOf(m1, "pbfs_replicate_resync_pause_seconds").minus(histOf(m0, "pbfs_replicate_resync_pause_seconds"))
	r.batchBytes = m1.sum("pbfs_replicate_bytes_sent_total", "") - m0.sum("pbfs_replicate_bytes_sent_total", "")
	r.batches = m1.sum("pbfs_replicate_batches_sent_total", "") - m0.sum("pbfs_replicate_batches_sent_total", "")
	t0 := time.Now()
	if r.cmp, err = compareTrees(vol, bvol); err != nil {
		return err
	}
	r.cmpTime = time.Since(t0)
	out, err := exec.Command("diff", "-r", "--no-dereference", "-q", vol, bvol).CombinedOutput()
	switch {
	case err == nil:
		r.diffOut = "no differences"
	default:
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		r.diffOut = fmt.Sprintf("%v, %d lines: %s", err, len(lines), strings.Join(lines[:min(5, len(lines))], " / "))
	}
	return nil
}

// sample is one point of part 2's curve.
type sample struct {
	at                time.Duration
	written, stored   float64 // pbfs_capture_write_bytes_total, pbfs_journal_bytes_total{stage="stored"}
	lastSeq, trimmed  float64
	primary, backup   diskUse
	backupApplied     uint64
	writerStopped     bool
	primaryStatusSeen bool
}

// partDisk is part 2.
func partDisk(ctx context.Context, e *env) error {
	cfg := e.cfg
	dir := filepath.Join(e.runDir, "disk")
	vol, bvol := filepath.Join(dir, "vol"), filepath.Join(dir, "bvol")
	jp, jb := filepath.Join(dir, "jp"), filepath.Join(dir, "jb")
	for _, d := range []string{filepath.Join(vol, "db"), bvol} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The writer's db files, written directly, then the backup starts empty
	// and is resynced before the measurement starts.
	var db []string
	data := randReader{newChaCha(cfg.seed + 7)}
	for i := 0; i < 4; i++ {
		rel := filepath.Join("db", fmt.Sprintf("table-%d.db", i))
		f, err := os.Create(filepath.Join(vol, rel))
		if err != nil {
			return err
		}
		_, err = copyN(f, data, cfg.diskMB*1e6/4/4096*4096)
		f.Close()
		if err != nil {
			return err
		}
		db = append(db, rel)
	}
	if err := syncfs(vol); err != nil {
		return err
	}
	baddr, err := freeAddr()
	if err != nil {
		return err
	}
	backup, err := e.startBackup(ctx, "backup", dir, baddr, bvol, jb, "--retain", cfg.backupRetain.String())
	if err != nil {
		return err
	}
	primary, cl, err := e.startPrimary(ctx, "primary", dir, vol, jp, "--backup", baddr, "--ack", "all",
		"--retain", cfg.retain.String(), "--retain-max", cfg.retainMax.String())
	if err != nil {
		return err
	}
	if _, err := primary.WaitEvent(ctx, "resync done", 0, 2*time.Minute); err != nil {
		return err
	}
	if _, err := barrierApplied(ctx, cl, time.Minute); err != nil {
		return err
	}
	d := &diskRun{}
	e.rep.disk = d
	take := func(t0 time.Time, stopped bool) error {
		s := sample{at: time.Since(t0), writerStopped: stopped}
		m, err := scrape(ctx, cl)
		if err != nil {
			return err
		}
		s.written = m.sum("pbfs_capture_write_bytes_total", "")
		s.stored = m.sum("pbfs_journal_bytes_total", `stage="stored"`)
		s.lastSeq = m.sum("pbfs_journal_batches_total", "")
		s.trimmed = m.sum("pbfs_journal_trimmed_batches_total", "")
		if st, err := cl.Status(ctx); err == nil && len(st.Backups) == 1 {
			s.backupApplied = st.Backups[0].AppliedSeq
			s.lastSeq = float64(st.LastSeq)
		}
		if s.primary, err = measureDisk(jp); err != nil {
			return err
		}
		if s.backup, err = measureDisk(jb); err != nil {
			return err
		}
		d.samples = append(d.samples, s)
		fmt.Fprintf(os.Stderr, "  t=%3.0fs written %6.1f MiB  primary journal %7.1f MiB (alloc %7.1f)  backup journal %7.1f MiB (alloc %7.1f)\n",
			s.at.Seconds(), s.written/(1<<20), float64(s.primary.apparent)/(1<<20), float64(s.primary.allocated)/(1<<20),
			float64(s.backup.apparent)/(1<<20), float64(s.backup.allocated)/(1<<20))
		return nil
	}
	fmt.Fprintf(os.Stderr, "part 2: writer at %d B/s for %s, journal sizes every %s\n", cfg.diskRate, cfg.diskDuration, cfg.diskSample)
	t0 := time.Now()
	if err := take(t0, false); err != nil {
		return err
	}
	wr, wstats, err := startWriter("writer", dir, vol, jp, cfg.diskRate, cfg.tick, cfg.barrierGap, cfg.seed+2, db)
	if err != nil {
		return err
	}
	w := wr
	e.onStop(func() error { return w.Stop(30 * time.Second) })
	for time.Since(t0) < cfg.diskDuration {
		sleep(ctx, cfg.diskSample-time.Since(t0)%cfg.diskSample)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := take(t0, false); err != nil {
			return err
		}
	}
	if d.writer, err = stopWriter(wr, wstats); err != nil {
		return err
	}
	d.writerStoppedAt = time.Since(t0)
	for time.Since(t0) < cfg.diskDuration+cfg.diskTail {
		sleep(ctx, cfg.diskSample-time.Since(t0)%cfg.diskSample)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := take(t0, true); err != nil {
			return err
		}
	}
	if _, err := barrierApplied(ctx, cl, time.Minute); err != nil {
		return err
	}
	var err2 error
	if d.cmp, err2 = compareTrees(vol, bvol); err2 != nil {
		return err2
	}
	if m, err := scrape(ctx, cl); err == nil {
		d.sentBytes = m.sum("pbfs_replicate_bytes_sent_total", "")
	}
	d.duSb = duSb(jp, jb)
	e.rep.complaints = append(e.rep.complaints, primary.Complaints()...)
	e.rep.complaints = append(e.rep.complaints, backup.Complaints()...)
	// After a clean stop Badger truncates its files: the size at rest.
	if err := e.stopAll(); err != nil {
		return err
	}
	if d.restPrimary, err = measureDisk(jp); err != nil {
		return err
	}
	if d.restBackup, err = measureDisk(jb); err != nil {
		return err
	}
	if !d.cmp.ok() {
		return fmt.Errorf("the backup differs from the primary after part 2:\n%s", strings.Join(d.cmp.diffs[:min(20, len(d.cmp.diffs))], "\n"))
	}
	return nil
}

type diskRun struct {
	samples                 []sample
	writer                  *writerStats
	writerStoppedAt         time.Duration
	cmp                     comparison
	sentBytes               float64
	duSb                    string
	restPrimary, restBackup diskUse
}

func duSb(dirs ...string) string {
	// Named relative to their common parent: a report carries no paths of
	// the machine it ran on.
	args := []string{"-sb"}
	for _, d := range dirs {
		args = append(args, filepath.Base(d))
	}
	cmd := exec.Command("du", args...)
	cmd.Dir = filepath.Dir(dirs[0])
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("du: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func countPbfsMounts() int {
	data, _ := os.ReadFile("/proc/mounts")
	return strings.Count(string(data), " fuse.pbfs ")
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// sigIgnored reads the SigIgn mask of /proc/self/status.
func sigIgnored(status string, sig syscall.Signal) bool {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}
