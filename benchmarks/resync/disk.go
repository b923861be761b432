package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/benchmarks/internal/treecmp"
	"github.com/pbfs/pbfs/control"
)

// partDisk is part 2.
func partDisk(ctx context.Context, e *env) error {
	dir := filepath.Join(e.runDir, "disk")
	p := &diskPart{e: e, cfg: e.cfg, dir: dir,
		vol: filepath.Join(dir, "vol"), bvol: filepath.Join(dir, "bvol"),
		jp: filepath.Join(dir, "jp"), jb: filepath.Join(dir, "jb")}
	for _, d := range []string{filepath.Join(p.vol, "db"), p.bvol} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	db, err := p.makeDB()
	if err != nil {
		return err
	}
	primary, backup, err := p.start(ctx)
	if err != nil {
		return err
	}
	p.d = &diskRun{}
	e.rep.disk = p.d
	if err := p.sample(ctx, db); err != nil {
		return err
	}
	return p.finish(ctx, primary, backup)
}

// diskPart is part 2 as it runs: its directories, its primary's control
// socket, and the run it fills in.
type diskPart struct {
	e                      *env
	cfg                    config
	dir, vol, bvol, jp, jb string
	cl                     *control.Client
	d                      *diskRun
	t0                     time.Time // the first sample
}

// makeDB writes the writer's db files directly to the volume and returns
// their paths relative to it.
func (p *diskPart) makeDB() ([]string, error) {
	var db []string
	data := randReader{newChaCha(p.cfg.seed + 7)}
	for i := 0; i < 4; i++ {
		rel := filepath.Join("db", fmt.Sprintf("table-%d.db", i))
		f, err := os.Create(filepath.Join(p.vol, rel))
		if err != nil {
			return nil, err
		}
		_, err = copyN(f, data, p.cfg.diskMB*1e6/4/4096*4096)
		f.Close()
		if err != nil {
			return nil, err
		}
		db = append(db, rel)
	}
	return db, syncfs(p.vol)
}

// start starts the backup empty and the primary, and waits until the
// backup is resynced and has applied a barrier, before the measurement.
func (p *diskPart) start(ctx context.Context) (primary, backup *proc, err error) {
	cfg := p.cfg
	baddr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	backup, err = p.e.startBackup(ctx, "backup", p.dir, baddr, p.bvol, p.jb, "--retain", cfg.backupRetain.String())
	if err != nil {
		return nil, nil, err
	}
	primary, p.cl, err = p.e.startPrimary(ctx, "primary", p.dir, p.vol, p.jp, "--backup", baddr, "--ack", "all",
		"--retain", cfg.retain.String(), "--retain-max", cfg.retainMax.String())
	if err != nil {
		return nil, nil, err
	}
	if _, err := primary.WaitEvent(ctx, "resync done", 0, 2*time.Minute); err != nil {
		return nil, nil, err
	}
	if _, err := barrierApplied(ctx, p.cl, time.Minute); err != nil {
		return nil, nil, err
	}
	return primary, backup, nil
}

// sample takes a sample, runs the writer for -disk-duration with a sample
// every -disk-sample, stops it, and samples for -disk-tail more.
func (p *diskPart) sample(ctx context.Context, db []string) error {
	cfg, d := p.cfg, p.d
	fmt.Fprintf(os.Stderr, "part 2: writer at %d B/s for %s, journal sizes every %s\n", cfg.diskRate, cfg.diskDuration, cfg.diskSample)
	p.t0 = time.Now()
	if err := p.take(ctx, false); err != nil {
		return err
	}
	wr, wstats, err := startWriter("writer", p.dir, p.vol, p.jp, cfg.diskRate, cfg.tick, cfg.barrierGap, cfg.seed+2, db)
	if err != nil {
		return err
	}
	w := wr
	p.e.onStop(func() error { return w.Stop(30 * time.Second) })
	if err := p.takeUntil(ctx, cfg.diskDuration, false); err != nil {
		return err
	}
	if d.writer, err = stopWriter(wr, wstats); err != nil {
		return err
	}
	d.writerStoppedAt = time.Since(p.t0)
	return p.takeUntil(ctx, cfg.diskDuration+cfg.diskTail, true)
}

// takeUntil takes a sample every -disk-sample until end after the first.
func (p *diskPart) takeUntil(ctx context.Context, end time.Duration, stopped bool) error {
	for time.Since(p.t0) < end {
		sleep(ctx, p.cfg.diskSample-time.Since(p.t0)%p.cfg.diskSample)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := p.take(ctx, stopped); err != nil {
			return err
		}
	}
	return nil
}

// take records one sample: the primary's metrics and status and both
// journals' sizes.
func (p *diskPart) take(ctx context.Context, stopped bool) error {
	cl := p.cl
	s := sample{at: time.Since(p.t0), writerStopped: stopped}
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
	if s.primary, err = measureDisk(p.jp); err != nil {
		return err
	}
	if s.backup, err = measureDisk(p.jb); err != nil {
		return err
	}
	p.d.samples = append(p.d.samples, s)
	fmt.Fprintf(os.Stderr, "  t=%3.0fs written %6.1f MiB  primary journal %7.1f MiB (alloc %7.1f)  backup journal %7.1f MiB (alloc %7.1f)\n",
		s.at.Seconds(), s.written/(1<<20), float64(s.primary.apparent)/(1<<20), float64(s.primary.allocated)/(1<<20),
		float64(s.backup.apparent)/(1<<20), float64(s.backup.allocated)/(1<<20))
	return nil
}

// finish compares the volumes after a last barrier, reads the bytes sent
// and the journals' du, stops everything and measures the journals at
// rest.
func (p *diskPart) finish(ctx context.Context, primary, backup *proc) error {
	e, d := p.e, p.d
	if _, err := barrierApplied(ctx, p.cl, time.Minute); err != nil {
		return err
	}
	var err error
	if d.cmp, err = treecmp.Compare(p.vol, p.bvol); err != nil {
		return err
	}
	if m, err := scrape(ctx, p.cl); err == nil {
		d.sentBytes = m.sum("pbfs_replicate_bytes_sent_total", "")
	}
	d.duSb = duSb(p.jp, p.jb)
	e.rep.complaints = append(e.rep.complaints, primary.Complaints()...)
	e.rep.complaints = append(e.rep.complaints, backup.Complaints()...)
	// After a clean stop Badger truncates its files: the size at rest.
	if err := e.stopAll(); err != nil {
		return err
	}
	if d.restPrimary, err = measureDisk(p.jp); err != nil {
		return err
	}
	if d.restBackup, err = measureDisk(p.jb); err != nil {
		return err
	}
	if !d.cmp.OK() {
		return fmt.Errorf("the backup differs from the primary after part 2:\n%s", strings.Join(d.cmp.Diffs[:min(20, len(d.cmp.Diffs))], "\n"))
	}
	return nil
}

// markdown writes part 2's section: the samples, the journals by kind of
// file, and the totals.
func (d *diskRun) markdown(b *strings.Builder, cfg config) {
	fmt.Fprintf(b, "\n## Part 2: journal disk use under a steady write load\n\n")
	fmt.Fprintf(b, "Primary `--ack all --retain %s --retain-max %s`, one backup `--retain %s`; writer at %s/s over 4 db files of %d MB together (4 KiB overwrites, every %s; barriers at most every %s) for %s, then %s more of sampling with the writer stopped. Sizes of the journal directories: apparent = `du -sb` (st_size), allocated = st_blocks.\n\n",
		cfg.retain, cfg.retainMax, cfg.backupRetain, bytesStr(float64(cfg.diskRate)), cfg.diskMB, cfg.tick, cfg.barrierGap, cfg.diskDuration, cfg.diskTail)
	d.writeSamples(b)
	d.writeKinds(b)
	d.writeTotals(b)
}

// writeSamples writes a row per sample, written and stored bytes counted
// from the first.
func (d *diskRun) writeSamples(b *strings.Builder) {
	b.WriteString("| t s | written MiB | journal stored MiB (cumulative) | batches | trimmed | kept | primary du -sb MiB | primary allocated MiB | backup du -sb MiB | backup allocated MiB |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	w0 := d.samples[0].written
	s0 := d.samples[0].stored
	for _, s := range d.samples {
		mark := ""
		if s.writerStopped {
			mark = " (stopped)"
		}
		fmt.Fprintf(b, "| %.0f%s | %s | %s | %.0f | %.0f | %.0f | %s | %s | %s | %s |\n", s.at.Seconds(), mark,
			mib(s.written-w0), mib(s.stored-s0), s.lastSeq, s.trimmed, s.lastSeq-s.trimmed,
			mib(float64(s.primary.apparent)), mib(float64(s.primary.allocated)), mib(float64(s.backup.apparent)), mib(float64(s.backup.allocated)))
	}
}

// writeKinds splits each journal by kind of file at its peak, at the last
// sample and at rest.
func (d *diskRun) writeKinds(b *strings.Builder) {
	last := d.samples[len(d.samples)-1]
	var peakP, peakB sample
	for _, s := range d.samples {
		if s.primary.allocated > peakP.primary.allocated {
			peakP = s
		}
		if s.backup.allocated > peakB.backup.allocated {
			peakB = s
		}
	}
	fmt.Fprintf(b, "\nBy kind (batch log segments, Badger's files), apparent / allocated MiB:\n\n| | seg | vlog | sst | mem | other |\n|---|---:|---:|---:|---:|---:|\n")
	kinds := func(label string, u diskUse) {
		fmt.Fprintf(b, "| %s |", label)
		for _, k := range []string{"seg", "vlog", "sst", "mem", "other"} {
			fmt.Fprintf(b, " %s / %s |", mib(float64(u.byKind[k])), mib(float64(u.allocByKind[k])))
		}
		b.WriteString("\n")
	}
	kinds(fmt.Sprintf("primary, peak allocated (t=%.0f s)", peakP.at.Seconds()), peakP.primary)
	kinds(fmt.Sprintf("primary, last sample (t=%.0f s)", last.at.Seconds()), last.primary)
	kinds("primary, after a clean stop", d.restPrimary)
	kinds(fmt.Sprintf("backup, peak allocated (t=%.0f s)", peakB.at.Seconds()), peakB.backup)
	kinds(fmt.Sprintf("backup, last sample (t=%.0f s)", last.at.Seconds()), last.backup)
	kinds("backup, after a clean stop", d.restBackup)
}

// writeTotals writes the bytes written and sent, the journals' du, the
// writer's latencies and whether the backup ended equal.
func (d *diskRun) writeTotals(b *strings.Builder) {
	last := d.samples[len(d.samples)-1]
	w0 := d.samples[0].written
	w := d.writer
	fmt.Fprintf(b, "\n- written through the mount: %s (`pbfs_capture_write_bytes_total`); the writer counted %s in %.0f s; sent to the backup: %s\n",
		bytesStr(last.written-w0), bytesStr(float64(w.Bytes)), w.Seconds, bytesStr(d.sentBytes))
	fmt.Fprintf(b, "- `du -sb` of both journals before the stop: %s\n", strings.ReplaceAll(d.duSb, "\n", "; "))
	fmt.Fprintf(b, "- writer: write op p50 / p99 / max %.2f / %.2f / %.0f ms; %d barriers, p50 / p99 / max %.1f / %.0f / %.0f ms; late ticks %d of %d; errors %d\n",
		w.OpP50, w.OpP99, w.OpMax, w.Barriers, w.BarrierP50, w.BarrierP99, w.BarrierMax, w.LateTicks, w.Ticks, w.Errors)
	if d.cmp.OK() {
		fmt.Fprintf(b, "- backup equal to the primary at the end: yes (%d paths)\n", d.cmp.Paths)
	} else {
		fmt.Fprintf(b, "- backup equal to the primary at the end: NO, %d differences: %s\n", len(d.cmp.Diffs), strings.Join(d.cmp.Diffs[:min(5, len(d.cmp.Diffs))], "; "))
	}
}

type diskRun struct {
	samples                 []sample
	writer                  *writerStats
	writerStoppedAt         time.Duration
	cmp                     treecmp.Comparison
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

// diskUse is the size of a directory's files: apparent (what `du -sb`
// reports: st_size) and allocated (st_blocks), with the apparent size split
// by kind: the batch log's segments (and its spare) and Badger's files.
type diskUse struct {
	apparent, allocated int64
	byKind              map[string]int64 // seg, vlog, sst, mem, other (apparent)
	allocByKind         map[string]int64
	files               int
}

func measureDisk(dir string) (diskUse, error) {
	u := diskUse{byKind: map[string]int64{}, allocByKind: map[string]int64{}}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // Badger removed it while we walked
			}
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		u.apparent += st.Size
		u.allocated += st.Blocks * 512
		if d.IsDir() {
			return nil
		}
		kind := "other"
		if filepath.Base(filepath.Dir(p)) == "batches" {
			kind = "seg"
		}
		switch filepath.Ext(p) {
		case ".vlog":
			kind = "vlog"
		case ".sst":
			kind = "sst"
		case ".mem":
			kind = "mem"
		case ".sock":
			return nil
		}
		u.byKind[kind] += st.Size
		u.allocByKind[kind] += st.Blocks * 512
		u.files++
		return nil
	})
	return u, err
}
