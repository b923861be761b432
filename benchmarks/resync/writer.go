package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/control"
)

// The writer is this program re-executed as `resync writer ...`: a
// separate process, like a service, that writes through the mount at a
// steady rate while another goroutine takes barriers in a closed loop. It
// runs until SIGINT or SIGTERM and then writes its statistics as JSON.

type writerConfig struct {
	vol, jdir, stats string
	rate             int // bytes per second
	tick             time.Duration
	barrierEvery     time.Duration
	seed             uint64
	db               string // comma-separated files under vol that take random 4 KiB overwrites
}

// slowOp is one operation that took long, with when it started.
type slowOp struct {
	At  float64 `json:"at_s"` // seconds since the writer started
	Op  string  `json:"op"`
	Dur float64 `json:"ms"`
}

type writerStats struct {
	Started       time.Time `json:"started"`
	Seconds       float64   `json:"seconds"`
	Bytes         int64     `json:"bytes"`
	Ops           int       `json:"ops"`
	Ticks         int       `json:"ticks"`
	LateTicks     int       `json:"late_ticks"` // ticks that started more than a tick late
	OpP50         float64   `json:"op_p50_ms"`
	OpP99         float64   `json:"op_p99_ms"`
	OpMax         float64   `json:"op_max_ms"`
	OpMaxAt       float64   `json:"op_max_at_s"`
	OpMaxName     string    `json:"op_max_name"`
	Barriers      int       `json:"barriers"`
	BarrierP50    float64   `json:"barrier_p50_ms"`
	BarrierP99    float64   `json:"barrier_p99_ms"`
	BarrierMax    float64   `json:"barrier_max_ms"`
	BarrierMaxAt  float64   `json:"barrier_max_at_s"`
	BarrierErrors int       `json:"barrier_errors"`
	Errors        int       `json:"errors"`
	FirstErrors   []string  `json:"first_errors"`
	Slow          []slowOp  `json:"slow"` // ops and barriers over 50 ms
}

func writerMain(args []string) {
	var c writerConfig
	fl := flag.NewFlagSet("writer", flag.ExitOnError)
	fl.StringVar(&c.vol, "vol", "", "the mounted volume")
	fl.StringVar(&c.jdir, "journal", "", "the mount's journal directory (for barriers)")
	fl.StringVar(&c.stats, "stats", "", "where to write the statistics (JSON)")
	fl.IntVar(&c.rate, "rate", 1<<20, "bytes per second")
	fl.DurationVar(&c.tick, "tick", 20*time.Millisecond, "write interval")
	fl.DurationVar(&c.barrierEvery, "barrier-every", 20*time.Millisecond, "least time between barrier starts")
	fl.Uint64Var(&c.seed, "seed", 1, "random seed")
	fl.StringVar(&c.db, "db", "", "comma-separated files (relative to -vol) that take 4 KiB overwrites")
	fl.Parse(args)
	if err := runWriter(c); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
}

// writer is the writer process's state: its files, its random sources
// and the statistics it gathers.
type writer struct {
	c       writerConfig
	dbs     []*os.File
	dbSizes []int64 // in 4 KiB pages
	logs    []*os.File
	rng     *mrand.Rand
	pool    []byte // random bytes the writes copy from

	st    *writerStats
	mu    sync.Mutex // guards st's error and slow lists
	start time.Time
	olat  []float64 // write op latencies, ms
	blat  []float64 // barrier latencies, ms

	created  []string // small files made, oldest first
	nextName int
}

func runWriter(c writerConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cl, err := control.Dial(c.jdir)
	if err != nil {
		return err
	}
	w := &writer{c: c}
	defer w.closeFiles()
	if err := w.openFiles(); err != nil {
		return err
	}
	w.rng = mrand.New(mrand.NewPCG(c.seed, 3))
	w.pool = make([]byte, 8<<20)
	mrand.NewChaCha8([32]byte{byte(c.seed), 'w'}).Read(w.pool)
	w.st = &writerStats{Started: time.Now()}
	w.start = w.st.Started

	var bwg sync.WaitGroup
	bwg.Add(1)
	go func() {
		defer bwg.Done()
		w.barriers(ctx, cl)
	}()
	w.writes(ctx)
	bwg.Wait()
	w.summarize()
	return w.writeStats()
}

// openFiles opens the db files and the four log files, making wlog/ and
// wnew/.
func (w *writer) openFiles() error {
	c := w.c
	for _, rel := range strings.Split(c.db, ",") {
		if rel == "" {
			continue
		}
		f, err := os.OpenFile(filepath.Join(c.vol, rel), os.O_RDWR, 0)
		if err != nil {
			return err
		}
		w.dbs = append(w.dbs, f)
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		w.dbSizes = append(w.dbSizes, fi.Size()/4096)
	}
	if len(w.dbs) == 0 {
		return fmt.Errorf("no -db files")
	}
	for _, d := range []string{"wlog", "wnew"} {
		if err := os.MkdirAll(filepath.Join(c.vol, d), 0o755); err != nil {
			return err
		}
	}
	for i := 0; i < 4; i++ {
		f, err := os.OpenFile(filepath.Join(c.vol, "wlog", fmt.Sprintf("app-%d.log", i)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		w.logs = append(w.logs, f)
	}
	return nil
}

// closeFiles closes what openFiles opened, newest first.
func (w *writer) closeFiles() {
	for i := len(w.logs) - 1; i >= 0; i-- {
		w.logs[i].Close()
	}
	for i := len(w.dbs) - 1; i >= 0; i-- {
		w.dbs[i].Close()
	}
}

func (w *writer) since(t time.Time) float64 { return t.Sub(w.start).Seconds() }

// fail counts an error and keeps the first ten.
func (w *writer) fail(err error) {
	w.mu.Lock()
	w.st.Errors++
	if len(w.st.FirstErrors) < 10 {
		w.st.FirstErrors = append(w.st.FirstErrors, err.Error())
	}
	w.mu.Unlock()
}

// slow keeps an operation that took over 50 ms.
func (w *writer) slow(t0 time.Time, op string, d time.Duration) {
	if d > 50*time.Millisecond {
		w.mu.Lock()
		w.st.Slow = append(w.st.Slow, slowOp{At: w.since(t0), Op: op, Dur: float64(d) / 1e6})
		w.mu.Unlock()
	}
}

// barriers takes barriers in a closed loop, at most one per barrierEvery,
// until ctx ends.
func (w *writer) barriers(ctx context.Context, cl *control.Client) {
	st := w.st
	for ctx.Err() == nil {
		t0 := time.Now()
		bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		_, err := cl.Barrier(bctx)
		cancel()
		d := time.Since(t0)
		if ctx.Err() != nil {
			return // cut short by the stop: not a sample
		}
		if err != nil {
			w.mu.Lock()
			st.BarrierErrors++
			w.mu.Unlock()
			w.fail(fmt.Errorf("barrier: %w", err))
		}
		ms := float64(d) / 1e6
		w.blat = append(w.blat, ms)
		if ms > st.BarrierMax {
			st.BarrierMax, st.BarrierMaxAt = ms, w.since(t0)
		}
		w.slow(t0, "barrier", d)
		select {
		case <-ctx.Done():
		case <-time.After(w.c.barrierEvery - d):
		}
	}
}

// timed runs one write operation and records its latency.
func (w *writer) timed(op string, f func() error) {
	t0 := time.Now()
	err := f()
	d := time.Since(t0)
	if err != nil {
		w.fail(fmt.Errorf("%s: %w", op, err))
	}
	ms := float64(d) / 1e6
	w.olat = append(w.olat, ms)
	if ms > w.st.OpMax {
		w.st.OpMax, w.st.OpMaxAt, w.st.OpMaxName = ms, w.since(t0), op
	}
	w.slow(t0, op, d)
}

// writes runs a round of writes every tick until ctx ends, counting the
// ticks that came late.
func (w *writer) writes(ctx context.Context) {
	c, st := w.c, w.st
	meanPages := max(1, c.rate*int(c.tick/time.Millisecond)/1000/4096)
	tk := time.NewTicker(c.tick)
	defer tk.Stop()
	next := time.Now()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			continue
		case now := <-tk.C:
			if now.Sub(next) > c.tick {
				st.LateTicks++
			}
			next = now.Add(c.tick)
		}
		st.Ticks++
		w.round(meanPages)
	}
}

// round is one tick's writes: 4 KiB overwrites of random pages of the db
// files (a random count, averaging meanPages), one log line, and now and
// then a small file created, renamed or deleted.
func (w *writer) round(meanPages int) {
	st, rng := w.st, w.rng
	pages := 1 + rng.IntN(2*meanPages)
	for i := 0; i < pages; i++ {
		k := rng.IntN(len(w.dbs))
		off := rng.Int64N(w.dbSizes[k]) * 4096
		src := rng.IntN(len(w.pool)/4096) * 4096
		w.timed("pwrite", func() error {
			_, err := w.dbs[k].WriteAt(w.pool[src:src+4096], off)
			return err
		})
		st.Bytes += 4096
		st.Ops++
	}
	line := fmt.Sprintf("%s tick=%d pages=%d request handled in %dus by worker %d\n",
		time.Now().UTC().Format(time.RFC3339Nano), st.Ticks, pages, rng.IntN(5000), rng.IntN(16))
	w.timed("append", func() error {
		_, err := w.logs[st.Ticks%len(w.logs)].Write([]byte(line))
		return err
	})
	st.Bytes += int64(len(line))
	st.Ops++
	w.smallFileOp()
}

// smallFileOp creates a small file every 10th tick, renames one every
// 25th and deletes the oldest every 40th once there are over 20.
func (w *writer) smallFileOp() {
	st, rng, vol := w.st, w.rng, w.c.vol
	switch {
	case st.Ticks%10 == 0:
		name := filepath.Join(vol, "wnew", fmt.Sprintf("n%06d", w.nextName))
		w.nextName++
		size := 1024 + rng.IntN(15*1024)
		src := rng.IntN(len(w.pool) - size)
		w.timed("create", func() error { return os.WriteFile(name, w.pool[src:src+size], 0o644) })
		w.created = append(w.created, name)
		st.Bytes += int64(size)
		st.Ops++
	case st.Ticks%25 == 1 && len(w.created) > 0:
		k := rng.IntN(len(w.created))
		to := filepath.Join(vol, "wnew", fmt.Sprintf("r%06d", w.nextName))
		w.nextName++
		w.timed("rename", func() error { return os.Rename(w.created[k], to) })
		w.created[k] = to
		st.Ops++
	case st.Ticks%40 == 3 && len(w.created) > 20:
		victim := w.created[0]
		w.created = w.created[1:]
		w.timed("unlink", func() error { return os.Remove(victim) })
		st.Ops++
	}
}

// summarize fills in the percentiles and sorts the slow operations by
// when they started.
func (w *writer) summarize() {
	st := w.st
	st.Seconds = time.Since(w.start).Seconds()
	slices.Sort(w.olat)
	slices.Sort(w.blat)
	st.OpP50, st.OpP99 = pct(w.olat, 0.5), pct(w.olat, 0.99)
	st.Barriers = len(w.blat)
	st.BarrierP50, st.BarrierP99 = pct(w.blat, 0.5), pct(w.blat, 0.99)
	slices.SortFunc(st.Slow, func(a, b slowOp) int {
		if a.At < b.At {
			return -1
		}
		if a.At > b.At {
			return 1
		}
		return 0
	})
}

// writeStats writes the statistics as JSON to -stats, atomically.
func (w *writer) writeStats() error {
	out, err := json.MarshalIndent(w.st, "", "  ")
	if err != nil {
		return err
	}
	tmp := w.c.stats + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, w.c.stats)
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// startWriter re-executes this program as a writer process.
func startWriter(name, dir, vol, jdir string, rate int, tick, barrierEvery time.Duration, seed uint64, db []string) (*proc, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	stats := filepath.Join(dir, name+".json")
	p, err := startProc(name, filepath.Join(dir, name+".log"), nil, self, "writer",
		"-vol", vol, "-journal", jdir, "-stats", stats, "-rate", fmt.Sprint(rate), "-tick", tick.String(),
		"-barrier-every", barrierEvery.String(), "-seed", fmt.Sprint(seed), "-db", strings.Join(db, ","))
	return p, stats, err
}

// stopWriter stops a writer and reads its statistics.
func stopWriter(p *proc, stats string) (*writerStats, error) {
	if err := p.Stop(30 * time.Second); err != nil {
		return nil, fmt.Errorf("%v\n%s", err, p.LogTail(10))
	}
	data, err := os.ReadFile(stats)
	if err != nil {
		return nil, err
	}
	var st writerStats
	return &st, json.Unmarshal(data, &st)
}
