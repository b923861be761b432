package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
)

// result is one point: one cluster, one write size.
type result struct {
	round     int
	delay     time.Duration
	backups   int
	size      int
	lat       []time.Duration // each barrier, sorted
	order     []time.Duration // each barrier, in the order they ran
	starts    []time.Duration // when each barrier started, since the point began
	elapsed   time.Duration   // the whole measured loop: writes and barriers
	writeTime time.Duration   // time spent in pwrite
	m         metrics         // metric deltas over the point
	cpuP      benchproc.CPU   // the primary's CPU (its flush helper included) over the point
	cpuB      benchproc.CPU   // all backups' CPU over the point
	tcpUp     int64           // bytes through the proxies, primary to backups, summed
	tcpDown   int64           // backups to primary, summed
}

func (r *result) rate() float64 { return float64(len(r.lat)) / r.elapsed.Seconds() }

// pct is the nearest-rank percentile.
func (r *result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(float64(len(r.lat))*p+0.999999) - 1
	return r.lat[max(0, min(i, len(r.lat)-1))]
}

func runPoint(ctx context.Context, c *pcluster, cfg config, size int, data []byte, off *int64) (*result, error) {
	w := &pointWriter{ctx: ctx, c: c, viaFsync: cfg.viaFsync, size: size, data: data, off: off,
		rng: mrand.New(mrand.NewPCG(uint64(size), uint64(len(c.Backups))))}
	var last uint64
	for i := 0; i < cfg.warmup; i++ {
		if err := w.write(); err != nil {
			return nil, err
		}
		seq, err := w.barrier()
		if err != nil {
			return nil, err
		}
		last = seq
	}
	if err := w.applied(last); err != nil {
		return nil, err
	}
	r := &result{delay: c.delay, backups: len(c.Backups), size: size}
	last, err := w.measure(r, last, cfg.duration, cfg.maxN)
	if err != nil {
		return nil, err
	}
	// Let the backups finish applying before the next point starts.
	return r, w.applied(last)
}

// pointWriter is one point's writer: a write of size bytes then a
// barrier, in a closed loop.
type pointWriter struct {
	ctx      context.Context
	c        *pcluster
	viaFsync bool // each barrier is an fsync under --fsync replicated
	size     int
	data     []byte
	off      *int64 // where the next write goes, across points
	rng      *mrand.Rand
}

// write writes size random bytes of data at the next offset, if size is
// not 0.
func (w *pointWriter) write() error {
	if w.size == 0 {
		return nil
	}
	src := w.rng.IntN(len(w.data) - w.size + 1)
	if _, err := w.c.file.WriteAt(w.data[src:src+w.size], *w.off); err != nil {
		return fmt.Errorf("%s: pwrite: %w", w.c.name, err)
	}
	*w.off = (*w.off + int64(w.size)) % (span - int64(w.size) + 1)
	return nil
}

// barrier is one barrier: a control-socket request, which returns its
// seq, or an fsync, which returns none.
func (w *pointWriter) barrier() (uint64, error) {
	if w.viaFsync {
		return 0, w.c.fsync()
	}
	return w.c.barrier(w.ctx)
}

// applied waits until the backups applied what the barriers so far
// covered. A fsync's barrier returns no seq; an empty control-socket
// barrier, outside what is timed, gives the last one.
func (w *pointWriter) applied(last uint64) error {
	if w.viaFsync {
		seq, err := w.c.barrier(w.ctx)
		if err != nil {
			return err
		}
		last = seq
	}
	return w.c.waitApplied(w.ctx, last)
}

// measure runs writes and barriers for d or maxN barriers (0: no limit),
// whichever comes first, into r: each barrier's latency and start, the
// time in pwrite, and the CPU, metrics and proxy bytes over the loop. It
// returns the last barrier's seq (last, the warm-up's, if it ran none).
func (w *pointWriter) measure(r *result, last uint64, d time.Duration, maxN int) (uint64, error) {
	ctx, c := w.ctx, w.c
	m0, err := scrape(ctx, c)
	if err != nil {
		return 0, err
	}
	up0, down0 := c.ProxyBytes()
	cpuP0, cpuB0 := c.CPU()
	start := time.Now()
	for time.Since(start) < d && (maxN == 0 || len(r.lat) < maxN) {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		t0 := time.Now()
		if err := w.write(); err != nil {
			return 0, err
		}
		t1 := time.Now()
		seq, err := w.barrier()
		if err != nil {
			return 0, err
		}
		t2 := time.Now()
		r.writeTime += t1.Sub(t0)
		r.lat = append(r.lat, t2.Sub(t1))
		r.starts = append(r.starts, t1.Sub(start))
		last = seq
	}
	r.elapsed = time.Since(start)
	cpuP1, cpuB1 := c.CPU()
	r.cpuP, r.cpuB = cpuP1.Minus(cpuP0), cpuB1.Minus(cpuB0)
	r.order = slices.Clone(r.lat)
	m1, err := scrape(ctx, c)
	if err != nil {
		return 0, err
	}
	up1, down1 := c.ProxyBytes()
	r.m = m1.minus(m0)
	r.tcpUp, r.tcpDown = up1-up0, down1-down0
	slices.Sort(r.lat)
	return last, nil
}

func writeSamples(dir string, round int, cluster string, r *result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("start_s,latency_ms\n")
	for i, l := range r.order {
		fmt.Fprintf(&b, "%.6f,%.3f\n", r.starts[i].Seconds(), float64(l)/1e6)
	}
	return os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d-%s-%d.csv", round, cluster, r.size)), []byte(b.String()), 0o644)
}
