package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/delayproxy"
	"github.com/pbfs/pbfs/benchmarks/internal/treecmp"
	"github.com/pbfs/pbfs/control"
)

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
	cmp                 treecmp.Comparison
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
	dir := filepath.Join(e.runDir, "resync")
	p := &resyncPart{e: e, cfg: e.cfg, dir: dir,
		vol: filepath.Join(dir, "vol"), bvol: filepath.Join(dir, "bvol"),
		jp: filepath.Join(dir, "jp"), jb: filepath.Join(dir, "jb")}
	for _, d := range []string{p.vol, p.bvol} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := p.start(ctx); err != nil {
		return err
	}
	backup, err := p.resyncEmpty(ctx)
	if err != nil {
		return err
	}
	return p.resyncAltered(ctx, backup)
}

// resyncPart is part 1 as it runs: its directories, the volume built, the
// counting proxy in front of the backup, and the primary.
type resyncPart struct {
	e                      *env
	cfg                    config
	dir, vol, bvol, jp, jb string
	built                  *built
	baddr                  string // the backup's address, behind px
	px                     *delayproxy.Proxy
	primary                *proc
	cl                     *control.Client
}

// start builds the volume and starts the primary, with a backup that is
// not there yet behind a proxy that counts the bytes.
func (p *resyncPart) start(ctx context.Context) error {
	cfg, rep := p.cfg, p.e.rep
	fmt.Fprintf(os.Stderr, "part 1: building the volume (%d files, %d MB)\n", cfg.files, cfg.mb)
	t0 := time.Now()
	b, err := buildVolume(p.vol, volumeSpec{files: cfg.files, dirs: cfg.dirs, bytes: cfg.mb * 1e6, seed: cfg.seed})
	if err != nil {
		return fmt.Errorf("build volume: %w", err)
	}
	p.built = b
	rep.built, rep.buildTime = b, time.Since(t0)

	if p.baddr, err = freeAddr(); err != nil {
		return err
	}
	// A proxy with no delay counts the bytes each way: the TCP payload, so
	// gRPC and HTTP/2 framing are included.
	if p.px, err = delayproxy.New("127.0.0.1:0", p.baddr, 0); err != nil {
		return err
	}
	p.e.onStop(p.px.Close)
	// The primary starts first, with a backup that is not there yet, so the
	// writer is running when the backup arrives: the resync happens under
	// load, as it would for a backup added to a live service.
	p.primary, p.cl, err = p.e.startPrimary(ctx, "primary", p.dir, p.vol, p.jp, "--backup", p.px.Addr(), "--ack", "all")
	return err
}

// startWriter starts a writer process on the primary's volume, stopped at
// the end if it is still running.
func (p *resyncPart) startWriter(name string, seed uint64) (*proc, string, error) {
	cfg := p.cfg
	wr, wstats, err := startWriter(name, p.dir, p.vol, p.jp, cfg.rate, cfg.tick, cfg.barrierGap, seed, p.built.dbFiles)
	if err != nil {
		return nil, "", err
	}
	p.e.onStop(func() error { return wr.Stop(30 * time.Second) })
	return wr, wstats, nil
}

// resyncEmpty is the first resync: the backup starts with an empty volume
// and journal while the writer runs. It returns the backup.
func (p *resyncPart) resyncEmpty(ctx context.Context) (*proc, error) {
	cfg, rep := p.cfg, p.e.rep
	wr, wstats, err := p.startWriter("writer1", cfg.seed)
	if err != nil {
		return nil, err
	}
	sleep(ctx, cfg.warm)
	m0, err := scrape(ctx, p.cl)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "part 1: starting the empty backup")
	r1 := &resyncRun{name: "new backup, empty volume and journal"}
	started := time.Now()
	backup, err := p.e.startBackup(ctx, "backup", p.dir, p.baddr, p.bvol, p.jb)
	if err != nil {
		return nil, err
	}
	if err := r1.watch(ctx, p.primary, backup, p.px, 0, started); err != nil {
		return nil, err
	}
	sleep(ctx, cfg.after)
	if r1.writer, err = stopWriter(wr, wstats); err != nil {
		return nil, err
	}
	if err := r1.finish(ctx, p.cl, m0, p.vol, p.bvol); err != nil {
		return nil, err
	}
	rep.resyncs = append(rep.resyncs, r1)
	if !r1.cmp.OK() {
		return nil, fmt.Errorf("the backup differs from the primary after the first resync:\n%s", strings.Join(r1.cmp.Diffs[:min(20, len(r1.cmp.Diffs))], "\n"))
	}
	return backup, nil
}

// resyncAltered is the second resync: the backup is stopped, altered
// behind its back and restarted, and `pbfs resync` is run, with the writer
// running unless -alter-writer=false.
func (p *resyncPart) resyncAltered(ctx context.Context, backup *proc) error {
	cfg, rep := p.cfg, p.e.rep
	fmt.Fprintln(os.Stderr, "part 1: altering the stopped backup")
	if err := backup.Stop(30 * time.Second); err != nil {
		return err
	}
	a, err := alterBackup(p.bvol, cfg.alter, cfg.seed)
	if err != nil {
		return fmt.Errorf("alter the backup: %w", err)
	}
	if backup, err = p.e.startBackup(ctx, "backup", p.dir, p.baddr, p.bvol, p.jb); err != nil {
		return err
	}
	var wr *proc
	var wstats string
	if cfg.alterWriter {
		if wr, wstats, err = p.startWriter("writer2", cfg.seed+1); err != nil {
			return err
		}
	}
	sleep(ctx, cfg.warm)
	m0, err := scrape(ctx, p.cl)
	if err != nil {
		return err
	}
	r2 := &resyncRun{name: fmt.Sprintf("mostly-correct copy (%.0f %% of files altered), `pbfs resync`", cfg.alter*100), alter: &a}
	if !cfg.alterWriter {
		r2.name += ", no writer"
	}
	started := time.Now()
	out, err := exec.Command(p.e.bin, "resync", "--journal", p.jp).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pbfs resync: %v: %s", err, out)
	}
	if err := r2.watch(ctx, p.primary, backup, p.px, 1, started); err != nil {
		return err
	}
	if wr != nil {
		sleep(ctx, cfg.after)
		if r2.writer, err = stopWriter(wr, wstats); err != nil {
			return err
		}
	}
	if err := r2.finish(ctx, p.cl, m0, p.vol, p.bvol); err != nil {
		return err
	}
	rep.resyncs = append(rep.resyncs, r2)
	rep.complaints = append(rep.complaints, p.primary.Complaints()...)
	rep.complaints = append(rep.complaints, backup.Complaints()...)
	if !r2.cmp.OK() {
		return fmt.Errorf("the backup differs from the primary after the second resync:\n%s", strings.Join(r2.cmp.Diffs[:min(20, len(r2.cmp.Diffs))], "\n"))
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
	if r.cmp, err = treecmp.Compare(vol, bvol); err != nil {
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
