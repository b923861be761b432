package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/prologue"
	benchreport "github.com/pbfs/pbfs/benchmarks/internal/report"
)

type calib struct {
	delay, direct, proxied time.Duration
}

type report struct {
	cfg                config
	commit             string
	start, end         time.Time
	loadStart, loadEnd string
	calStart, calEnd   benchproc.Calibration
	otherMounts        int
	calib              []calib
	results            []*result
	verified           []string
	complaints         []string
	leftMounts         []string
}

// point is one point pooled over the rounds.
type point struct {
	*result                 // latencies, times, metrics and bytes summed over the rounds
	p50s    []time.Duration // each round's p50
}

// points pools the results by delay, backup count and size, in the order
// of the report's tables: size, then delay, then backups.
func (rep *report) points() []*point {
	var out []*point
	for _, size := range rep.cfg.sizes {
		for _, d := range rep.cfg.delays {
			for _, n := range rep.cfg.backups {
				var p *point
				for _, r := range rep.results {
					if r.size != size || r.delay != d || r.backups != n {
						continue
					}
					if p == nil {
						p = &point{result: &result{delay: d, backups: n, size: size, m: metrics{}}}
					}
					p.lat = append(p.lat, r.lat...)
					p.elapsed += r.elapsed
					p.writeTime += r.writeTime
					p.m = p.m.plus(r.m)
					p.cpuP, p.cpuB = p.cpuP.Plus(r.cpuP), p.cpuB.Plus(r.cpuB)
					p.tcpUp += r.tcpUp
					p.tcpDown += r.tcpDown
					p.p50s = append(p.p50s, r.pct(0.5))
				}
				if p != nil {
					slices.Sort(p.lat)
					slices.Sort(p.p50s)
					out = append(out, p)
				}
			}
		}
	}
	return out
}

func workload(size int) string {
	if size == 0 {
		return "empty"
	}
	n, unit := inUnits(size)
	return fmt.Sprintf("%d %s write", n, map[string]string{"m": "MiB", "k": "KiB", "": "B"}[unit])
}

// inUnits is size in the largest of MiB ("m"), KiB ("k") or bytes ("")
// that holds it whole.
func inUnits(size int) (int, string) {
	switch {
	case size != 0 && size%(1<<20) == 0:
		return size >> 20, "m"
	case size != 0 && size%(1<<10) == 0:
		return size >> 10, "k"
	}
	return size, ""
}

func delayName(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return fmt.Sprintf("%g ms", float64(d)/1e6)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }

// cpuStr is CPU per unit in ms, with the kernel's share.
func cpuStr(c benchproc.CPU, n time.Duration) string {
	if n == 0 || c.Total() == 0 {
		return "0"
	}
	return fmt.Sprintf("%s (%.0f %% sys)", ms(c.Total()/n), 100*float64(c.Sys)/float64(c.Total()))
}

func bytesStr(v float64) string { return benchreport.Bytes(v) }

func (rep *report) markdown() string {
	var b strings.Builder
	rep.writeHeader(&b)
	pts := rep.points()
	writeLatency(&b, pts, rep.cfg.viaFsync)
	writeBreakdown(&b, pts, rep.cfg.viaFsync)
	writeCPU(&b, pts)
	writeBytes(&b, pts)
	rep.writeChecks(&b)
	return b.String()
}

// writeHeader writes the title and the run: its command, settings,
// machine and the delay proxies' calibration.
func (rep *report) writeHeader(b *strings.Builder) {
	cfg := rep.cfg
	fmt.Fprintf(b, "# Replication: barrier latency, %s\n\n", rep.start.UTC().Format("2006-01-02 15:04:05 UTC"))
	fmt.Fprintf(b, "- command: `go run ./benchmarks/replicate %s`\n", benchproc.ShownArgs(os.Args[1:]))
	fmt.Fprintf(b, "- pbfs: %s; %s, %d CPUs, kernel %s\n", rep.commit, runtime.Version(), runtime.NumCPU(), prologue.Kernel())
	fmt.Fprintf(b, "- %d round(s) of the whole matrix, samples pooled per point; in each, every point: %d warm-up barriers, then %s", cfg.rounds, cfg.warmup, cfg.duration)
	if cfg.maxN > 0 {
		fmt.Fprintf(b, " or %d barriers, whichever comes first", cfg.maxN)
	}
	mode := "O_RDWR"
	if cfg.wronly {
		mode = "O_WRONLY"
	}
	ask := "a control-socket barrier (as `pbfs barrier`)"
	if cfg.viaFsync {
		ask = "fsync(2) under --fsync replicated (a replicated commit)"
	}
	fmt.Fprintf(b, "; one writer (file open %s), write then %s, in a closed loop; --ack all; data: %s\n", mode, ask, cfg.data)
	fmt.Fprintf(b, "- load average at start %s, at end %s; fuse.pbfs mounts of others at start: %d; run took %s\n",
		rep.loadStart, rep.loadEnd, rep.otherMounts, rep.end.Sub(rep.start).Round(time.Second))
	fmt.Fprintf(b, "- machine at start: %s\n- machine at end: %s\n", rep.calStart, rep.calEnd)
	for _, c := range rep.calib {
		fmt.Fprintf(b, "- delay proxy at %s each way: 64-byte echo round trip p50 %s ms direct, %s ms through the proxy (+%s ms; %s ms expected)\n",
			delayName(c.delay), ms(c.direct), ms(c.proxied), ms(c.proxied-c.direct), ms(2*c.delay))
	}
}

// writeLatency writes each point's barrier latency and rate, with the
// primary's own means of its commit and ack wait.
func writeLatency(b *strings.Builder, pts []*point, viaFsync bool) {
	fmt.Fprintf(b, "\n## Barrier latency\n\n")
	if viaFsync {
		fmt.Fprintf(b, "Latency is from the fsync(2) call to its return (a barrier under --fsync replicated, with no flush round); the write before it is not\n")
	} else {
		fmt.Fprintf(b, "Latency is from the barrier request on the control socket to its answer; the write before it is not\n")
	}
	fmt.Fprintf(b, "included. barriers/s counts the whole loop (write + barrier). The primary's own split of a barrier, as means:\n")
	fmt.Fprintf(b, "commit = seal and durable journal append (`pbfs_journal_commit_seconds`, per batch), ack wait = from there until\n")
	fmt.Fprintf(b, "the ack set holds the batch (`pbfs_replicate_barrier_seconds`, per barrier). Compare them with the mean, not the p50.\n\n")
	b.WriteString("| workload | added delay each way | backups | barriers | barriers/s | p50 ms | p99 ms | max ms | p50 by round, min–max ms | mean ms | commit ms | ack wait ms | pwrite ms |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range pts {
		if len(r.lat) == 0 {
			continue
		}
		pw := "–"
		if r.size > 0 {
			pw = ms(r.writeTime / time.Duration(len(r.lat)))
		}
		var sum time.Duration
		for _, l := range r.lat {
			sum += l
		}
		fmt.Fprintf(b, "| %s | %s | %d | %d | %.0f | %s | %s | %s | %s–%s | %s | %s | %s | %s |\n",
			workload(r.size), delayName(r.delay), r.backups, len(r.lat), r.rate(),
			ms(r.pct(0.5)), ms(r.pct(0.99)), ms(r.lat[len(r.lat)-1]), ms(r.p50s[0]), ms(r.p50s[len(r.p50s)-1]),
			ms(sum/time.Duration(len(r.lat))),
			r.m.mean("pbfs_journal_commit_seconds"), r.m.mean("pbfs_replicate_barrier_seconds"), pw)
	}
}

// writeCPU writes each point's CPU per barrier, the primary's and each
// backup's.
func writeCPU(b *strings.Builder, pts []*point) {
	fmt.Fprintf(b, "\n## CPU per barrier\n\n")
	b.WriteString("CPU time (user + system, from /proc) over the measured loop divided by its barriers: the primary's\n")
	b.WriteString("process group (the mount and its flush helper) and each backup's, as a mean over the backups; the share\n")
	b.WriteString("spent in the kernel in brackets. /proc counts in 10 ms ticks, so short points are coarse.\n\n")
	b.WriteString("| workload | added delay each way | backups | barriers | primary CPU ms/barrier | backup CPU ms/barrier, each | all pbfs CPU ms/barrier |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range pts {
		if len(r.lat) == 0 {
			continue
		}
		n := time.Duration(len(r.lat))
		bk := "–"
		if r.backups > 0 {
			bk = cpuStr(r.cpuB, n*time.Duration(r.backups))
		}
		fmt.Fprintf(b, "| %s | %s | %d | %d | %s | %s | %s |\n", workload(r.size), delayName(r.delay), r.backups, len(r.lat),
			cpuStr(r.cpuP, n), bk, ms(r.cpuP.Plus(r.cpuB).Total()/n))
	}
}

// writeBytes writes each point's bytes per batch: written, stored, sent
// and through the delay proxy.
func writeBytes(b *strings.Builder, pts []*point) {
	fmt.Fprintf(b, "\n## Bytes per batch\n\n")
	b.WriteString("written: `pbfs_capture_write_bytes_total`; stored: `pbfs_journal_bytes_total{stage=\"stored\"}` (encoded, compressed);\n")
	b.WriteString("sent: `pbfs_replicate_bytes_sent_total` per backup (encoded batches handed to gRPC); TCP: bytes the delay proxy\n")
	b.WriteString("forwarded per backup (gRPC and HTTP/2 framing, acks and keepalives included). Per batch = divided by\n")
	b.WriteString("`pbfs_journal_batches_total`'s increase. Empty barriers seal no batch, so they have no row here.\n\n")
	b.WriteString("| workload | added delay each way | backups | batches | batches/barrier | written/batch | stored/batch | sent/batch/backup | sent ÷ written | TCP primary→backup/batch | TCP backup→primary/batch |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range pts {
		batches := r.m.sum("pbfs_journal_batches_total", "")
		if batches == 0 {
			continue
		}
		written := r.m.sum("pbfs_capture_write_bytes_total", "") / batches
		stored := r.m.sum("pbfs_journal_bytes_total", `stage="stored"`) / batches
		sent, ratio, up, down := "–", "–", "–", "–"
		if r.backups > 0 {
			s := r.m.sum("pbfs_replicate_bytes_sent_total", "") / float64(r.backups) / batches
			sent = bytesStr(s)
			if written > 0 {
				ratio = fmt.Sprintf("%.3f", s/written)
			}
			if r.delay > 0 {
				up = bytesStr(float64(r.tcpUp) / float64(r.backups) / batches)
				down = bytesStr(float64(r.tcpDown) / float64(r.backups) / batches)
			}
		}
		fmt.Fprintf(b, "| %s | %s | %d | %.0f | %.2f | %s | %s | %s | %s | %s | %s |\n",
			workload(r.size), delayName(r.delay), r.backups, batches, batches/float64(len(r.lat)),
			bytesStr(written), bytesStr(stored), sent, ratio, up, down)
	}
}

// writeChecks writes the backups' verification, the batches the timer
// sealed, and the leftover mounts and log complaints.
func (rep *report) writeChecks(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Checks\n\n")
	fmt.Fprintf(b, "- backups' copy of the data file equal to the primary's after each configuration: %s\n", strings.Join(rep.verified, ", "))
	timer := 0.0
	for _, r := range rep.results {
		timer += r.m.sum("pbfs_capture_seals_total", `trigger="timer"`)
	}
	fmt.Fprintf(b, "- batches sealed by the 50 ms timer rather than by a barrier during measurement: %.0f\n", timer)
	benchreport.WriteChecks(b, rep.leftMounts, rep.complaints)
}
