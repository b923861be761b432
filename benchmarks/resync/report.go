package main

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/prologue"
	benchreport "github.com/pbfs/pbfs/benchmarks/internal/report"
)

func newChaCha(seed uint64) *mrand.ChaCha8 {
	return mrand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 'd', 'i', 's', 'k'})
}

func copyN(w io.Writer, r io.Reader, n int64) (int64, error) { return io.CopyN(w, r, n) }

type report struct {
	cfg                config
	commit             string
	start, end         time.Time
	loadStart, loadEnd string
	otherMounts        int
	built              *built
	buildTime          time.Duration
	resyncs            []*resyncRun
	disk               *diskRun
	rejoin             *rejoinResult
	complaints         []string
	leftMounts         []string

	mu      sync.Mutex
	loadMax float64
}

// watchLoad keeps the highest 1-minute load average seen during the run.
func (r *report) watchLoad(ctx context.Context) {
	for ctx.Err() == nil {
		f := strings.Fields(benchproc.LoadAvg())
		if len(f) > 0 {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				r.mu.Lock()
				r.loadMax = max(r.loadMax, v)
				r.mu.Unlock()
			}
		}
		sleep(ctx, 5*time.Second)
	}
}

func mib(v float64) string { return fmt.Sprintf("%.1f", v/(1<<20)) }

func bytesStr(v float64) string { return benchreport.Bytes(v) }

func atof(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

func (r *report) markdown() string {
	var b strings.Builder
	r.writeHeader(&b)
	if r.built != nil {
		r.writeResyncs(&b)
	}
	if r.disk != nil {
		r.disk.markdown(&b, r.cfg)
	}
	if r.rejoin != nil {
		r.rejoin.markdown(&b)
	}
	fmt.Fprintf(&b, "\n## Checks\n\n")
	benchreport.WriteChecks(&b, r.leftMounts, r.complaints)
	return b.String()
}

// writeHeader writes the title and the run's command, versions and load.
func (r *report) writeHeader(b *strings.Builder) {
	fmt.Fprintf(b, "# Resync and journal disk use, %s\n\n", r.start.UTC().Format("2006-01-02 15:04:05 UTC"))
	fmt.Fprintf(b, "- command: `go run ./benchmarks/resync %s`\n", benchproc.ShownArgs(os.Args[1:]))
	fmt.Fprintf(b, "- pbfs: %s; %s, %d CPUs, kernel %s\n", r.commit, runtime.Version(), runtime.NumCPU(), prologue.Kernel())
	r.mu.Lock()
	fmt.Fprintf(b, "- load average at start %s, at end %s, highest 1-minute value seen %.2f; fuse.pbfs mounts of others at start: %d; run took %s\n",
		r.loadStart, r.loadEnd, r.loadMax, r.otherMounts, r.end.Sub(r.start).Round(time.Second))
	r.mu.Unlock()
}

// writeResyncs writes part 1's section: the volume and the writer, one
// column per resync, then what was altered, the writer's slow operations
// and errors and the differences found.
func (r *report) writeResyncs(b *strings.Builder) {
	bl, cfg := r.built, r.cfg
	fmt.Fprintf(b, "\n## Part 1: resync\n\n")
	fmt.Fprintf(b, "Volume (built in %s, directly on the backing file system, random incompressible bytes): %d regular file names (%d hard links among them) in %d directories, %d symlinks, %d files with a user xattr; %s bytes = %s: %d large files of %s (%s), %d medium (%s), %d small (%s, average %s).\n\n",
		r.buildTime.Round(100*time.Millisecond), bl.files, bl.hardlinks, bl.dirs, bl.symlinks, bl.xattrs,
		commas(bl.bytes), bytesStr(float64(bl.bytes)), bl.large, bytesStr(float64(bl.largeBytes/int64(max(bl.large, 1)))), bytesStr(float64(bl.largeBytes)),
		bl.medium, bytesStr(float64(bl.mediumBytes)), bl.small, bytesStr(float64(bl.smallBytes)), bytesStr(float64(bl.smallBytes)/float64(max(bl.small, 1))))
	fmt.Fprintf(b, "Writer (a separate process): every %s, 4 KiB overwrites of random pages of the %d db/ files (%s/s on average), a log line, and every 10th/25th/40th round a small file created/renamed/deleted; a closed loop of barriers at most every %s. The primary started first with its backup absent; the writer ran %s before the backup (or `pbfs resync`) started and %s after the resync was done, then stopped; then a barrier, a wait until the backup applied it, and the comparison.\n\n",
		cfg.tick, len(bl.dbFiles), bytesStr(float64(cfg.rate)), cfg.barrierGap, cfg.warm, cfg.after)
	writeResyncTable(b, r.resyncs)
	writeAlterations(b, r.resyncs)
	writeSlowOps(b, r.resyncs)
	writeResyncDiffs(b, r.resyncs)
}

// writeResyncTable writes part 1's table: a row per measure, a column per
// resync.
func writeResyncTable(b *strings.Builder, runs []*resyncRun) {
	b.WriteString("| | " + strings.Join(names(runs), " | ") + " |\n|---|" + strings.Repeat("---:|", len(runs)) + "\n")
	row := func(label string, f func(x *resyncRun) string) {
		var cells []string
		for _, x := range runs {
			cells = append(cells, f(x))
		}
		fmt.Fprintf(b, "| %s | %s |\n", label, strings.Join(cells, " | "))
	}
	row("snapshot: entries / regular-file bytes", func(x *resyncRun) string {
		return fmt.Sprintf("%s / %s", x.snapshot["entries"], commas(int64(atof(x.snapshot["bytes"]))))
	})
	row("**pause** (primary log)", func(x *resyncRun) string { return "**" + x.done["pause"] + "**" })
	row("pause histogram: count, sum, bucket", func(x *resyncRun) string {
		return fmt.Sprintf("%.0f, %.1f ms, %s", x.pauseHist.count, x.pauseHist.sum*1e3, x.pauseHist.bound())
	})
	row("**resync took** (primary log)", func(x *resyncRun) string { return "**" + x.done["took"] + "**" })
	row("backup start / `pbfs resync` to \"resync done\"", func(x *resyncRun) string { return x.wall.Round(10 * time.Millisecond).String() })
	row("files_differed (primary) / files_changed (backup)", func(x *resyncRun) string {
		return x.done["files_differed"] + " / " + x.backupDone["files_changed"]
	})
	row("blocks_sent (64 KiB)", func(x *resyncRun) string { return x.done["blocks_sent"] })
	row("removed", func(x *resyncRun) string { return x.done["removed"] })
	row("**TCP primary→backup during the resync**", func(x *resyncRun) string { return "**" + bytesStr(float64(x.wireUp)) + "**" })
	row("… ÷ volume bytes", func(x *resyncRun) string {
		return fmt.Sprintf("%.4f", float64(x.wireUp)/max(1, atof(x.snapshot["bytes"])))
	})
	row("TCP backup→primary during the resync", func(x *resyncRun) string { return bytesStr(float64(x.wireDown)) })
	row("batches sent over the phase (bytes)", func(x *resyncRun) string {
		return fmt.Sprintf("%.0f (%s)", x.batches, bytesStr(x.batchBytes))
	})
	writeWriterRows(row)
	row("**backup equal to primary** (paths compared)", func(x *resyncRun) string {
		if x.cmp.OK() {
			return fmt.Sprintf("**yes** (%d paths, %s hashed, %s)", x.cmp.Paths, bytesStr(float64(x.cmp.Bytes)), x.cmpTime.Round(100*time.Millisecond))
		}
		return fmt.Sprintf("**NO: %d differences**", len(x.cmp.Diffs))
	})
	row("`diff -r --no-dereference -q`", func(x *resyncRun) string { return x.diffOut })
	row("mtimes differing: files / dirs", func(x *resyncRun) string {
		return fmt.Sprintf("%d / %d", x.cmp.MtimeFiles, x.cmp.MtimeDirs)
	})
}

// writeWriterRows writes the rows of part 1's table about the writer, "–"
// where a resync ran without one.
func writeWriterRows(row func(label string, f func(x *resyncRun) string)) {
	writer := func(label string, f func(w *writerStats) string) {
		row(label, func(x *resyncRun) string {
			if x.writer == nil {
				return "–"
			}
			return f(x.writer)
		})
	}
	writer("writer: bytes written, seconds", func(w *writerStats) string {
		return fmt.Sprintf("%s, %.1f s", bytesStr(float64(w.Bytes)), w.Seconds)
	})
	writer("writer: write op p50 / p99 / max ms (max at s)", func(w *writerStats) string {
		return fmt.Sprintf("%.2f / %.2f / %.0f (%s at %.1f)", w.OpP50, w.OpP99, w.OpMax, w.OpMaxName, w.OpMaxAt)
	})
	writer("writer: barriers, p50 / p99 / max ms (max at s)", func(w *writerStats) string {
		return fmt.Sprintf("%d, %.1f / %.0f / %.0f (%.1f)", w.Barriers, w.BarrierP50, w.BarrierP99, w.BarrierMax, w.BarrierMaxAt)
	})
	writer("writer: late ticks / errors", func(w *writerStats) string {
		return fmt.Sprintf("%d of %d / %d", w.LateTicks, w.Ticks, w.Errors)
	})
}

// writeAlterations says what was changed behind a stopped backup's back.
func writeAlterations(b *strings.Builder, runs []*resyncRun) {
	for _, x := range runs {
		if a := x.alter; a != nil {
			fmt.Fprintf(b, "\nAltered on the stopped backup: %d files (%d overwritten 16 bytes in place, %d large files 100 bytes in the middle, %d appended 1,000 bytes, %d deleted, %d new files added, %d chmod only).\n",
				a.total(), a.overwritten, a.largeBlocks, a.appended, a.deleted, a.added, a.chmodded)
		}
	}
}

// writeSlowOps lists each writer's operations over 50 ms (the first 25)
// and its first errors.
func writeSlowOps(b *strings.Builder, runs []*resyncRun) {
	for _, x := range runs {
		if x.writer == nil || len(x.writer.Slow) == 0 {
			continue
		}
		fmt.Fprintf(b, "\nWriter operations over 50 ms during \"%s\" (s since the writer started: op ms):", x.name)
		for i, s := range x.writer.Slow {
			if i == 25 {
				fmt.Fprintf(b, " … %d more", len(x.writer.Slow)-25)
				break
			}
			fmt.Fprintf(b, " %.2f %s %.0f;", s.At, s.Op, s.Dur)
		}
		b.WriteString("\n")
		if len(x.writer.FirstErrors) > 0 {
			fmt.Fprintf(b, "\nWriter errors: %s\n", strings.Join(x.writer.FirstErrors, "; "))
		}
	}
}

// writeResyncDiffs lists the first 20 differences after each resync that
// left the backup unequal.
func writeResyncDiffs(b *strings.Builder, runs []*resyncRun) {
	for _, x := range runs {
		if len(x.cmp.Diffs) > 0 {
			fmt.Fprintf(b, "\nDifferences after \"%s\" (first 20):\n\n", x.name)
			for _, d := range x.cmp.Diffs[:min(20, len(x.cmp.Diffs))] {
				fmt.Fprintf(b, "    %s\n", d)
			}
		}
	}
}

func names(rs []*resyncRun) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.name)
	}
	return out
}

func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
