package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/treecmp"
)

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
	if d.cmp, err2 = treecmp.Compare(vol, bvol); err2 != nil {
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
