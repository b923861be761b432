// Command replicate measures what replication costs a barrier: latency
// (p50, p99) and barriers per second with 0, 1 and 2 backups, for empty
// barriers and for barriers that each cover one 4 KiB or 256 KiB write,
// on loopback and with a fixed one-way delay added in each direction by
// an in-process TCP proxy (benchmarks/internal/delayproxy). It also reports the bytes shipped
// per batch against the bytes the service wrote, from the primary's
// metrics and, on delayed links, from the proxy's own byte counts.
//
// Every primary and backup is a real `pbfs` process on this machine; the
// benchmark writes through the mount with pwrite and asks for barriers on
// the control socket. Run from the module root:
//
//	go run ./benchmarks/replicate            # about 2 minutes with the defaults
//	go run ./benchmarks/replicate -h         # the settings
//
// It needs root and /dev/fuse. Everything lives in a fresh directory under
// -workdir (default /var/tmp); every process is stopped and every mount
// removed at the end, on failure and on Ctrl-C too.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/delayproxy"
)

type config struct {
	bin        string
	duration   time.Duration
	rounds     int
	maxN       int
	warmup     int
	backups    []int
	sizes      []int
	delays     []time.Duration
	data       string
	workdir    string
	keep       bool
	resultsDir string
	samplesDir string
	mountArgs  []string // extra flags for the primary's pbfs mount
	backupArgs []string // and for each pbfs backup
	wronly     bool     // open the data file O_WRONLY (no flush round) rather than O_RDWR
}

func main() {
	var cfg config
	var backups, sizes, delays string
	flag.StringVar(&cfg.bin, "bin", os.Getenv("PBFS_BIN"), "pbfs binary under test (default $PBFS_BIN, else built from this module into the run directory)")
	flag.DurationVar(&cfg.duration, "duration", 2*time.Second, "how long each point runs")
	flag.IntVar(&cfg.rounds, "rounds", 3, "times the whole matrix runs; a point's samples are pooled over the rounds")
	flag.IntVar(&cfg.maxN, "n", 0, "stop a point after this many barriers, if that comes before -duration (0: no cap)")
	flag.IntVar(&cfg.warmup, "warmup", 50, "unmeasured barriers (with their writes) before each point")
	flag.StringVar(&backups, "backups", "0,1,2", "backup counts to measure")
	flag.StringVar(&sizes, "sizes", "0,4096,262144", "bytes written before each barrier; 0 means an empty barrier")
	flag.StringVar(&delays, "delays", "0,500us", "one-way delays added in each direction between primary and backups (0: direct loopback)")
	flag.StringVar(&cfg.data, "data", "random", "what the writes contain: random (incompressible) or text (log-like lines, compressible)")
	flag.StringVar(&cfg.workdir, "workdir", "/var/tmp", "where the run's directory is created (never under the repository)")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the run's directory (logs, journals, volumes); a failed run always keeps it")
	flag.StringVar(&cfg.resultsDir, "results-dir", "benchmarks/results", "where the report is written as replicate-<UTC date>.md (empty: stdout only)")
	flag.StringVar(&cfg.samplesDir, "samples", "", "also write every barrier's start (s since the point began) and latency (ms) to DIR/<round>-<cluster>-<size>.csv")
	var mountArgs, backupArgs string
	flag.StringVar(&mountArgs, "mount-args", "", "extra flags for the primary's `pbfs mount`, space-separated (for example --ack-level=memory)")
	flag.StringVar(&backupArgs, "backup-args", "", "extra flags for each `pbfs backup`, space-separated")
	flag.BoolVar(&cfg.wronly, "wronly", false, "open the data file O_WRONLY, as a log writer does: barriers then make no flush round (a file open O_RDWR could be mapped writable)")
	flag.Parse()
	cfg.mountArgs, cfg.backupArgs = strings.Fields(mountArgs), strings.Fields(backupArgs)
	var err error
	if cfg.backups, err = parseList(backups, strconv.Atoi); err == nil {
		if cfg.sizes, err = parseList(sizes, parseSize); err == nil {
			cfg.delays, err = parseList(delays, parseDelay)
		}
	}
	if err == nil && cfg.rounds < 1 {
		err = fmt.Errorf("-rounds %d: want at least 1", cfg.rounds)
	}
	if err == nil && cfg.data != "random" && cfg.data != "text" {
		err = fmt.Errorf("-data %q: want random or text", cfg.data)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "replicate:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "replicate: FAILED:", err)
		os.Exit(1)
	}
}

func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		v, err := parse(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func parseSize(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "m"), strings.HasSuffix(s, "M"):
		mult, s = 1<<20, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n*mult > 16<<20 {
		return 0, fmt.Errorf("size %q: want a byte count from 0 to 16M", s)
	}
	return n * mult, nil
}

func parseDelay(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	return time.ParseDuration(s)
}

// span is the region of the data file the writes cycle through.
const span = 64 << 20

func run(cfg config) (err error) {
	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("no /dev/fuse: %w", err)
	}
	if wd, _ := os.Getwd(); wd != "" {
		if abs, _ := filepath.Abs(cfg.workdir); strings.HasPrefix(abs+"/", wd+"/") {
			return fmt.Errorf("-workdir %s is inside the current directory: use a scratch directory such as /var/tmp", cfg.workdir)
		}
	}
	runDir, err := os.MkdirTemp(cfg.workdir, "pbfs-repl.")
	if err != nil {
		return err
	}
	var live []*cluster
	defer func() {
		// Stop whatever is still running, whatever happened.
		for _, c := range live {
			if e := c.stop(); e != nil {
				err = errors.Join(err, e)
			}
		}
		if left := mountsUnder(runDir); len(left) > 0 {
			for _, m := range left {
				syscall.Unmount(m, syscall.MNT_DETACH)
			}
			err = errors.Join(err, fmt.Errorf("mounts left behind (now detached): %v", left))
		}
		if err != nil || cfg.keep {
			fmt.Fprintln(os.Stderr, "replicate: kept", runDir)
		} else {
			os.RemoveAll(runDir)
		}
	}()

	bin := cfg.bin
	commit := benchproc.Commit()
	if bin == "" {
		bin = filepath.Join(runDir, "pbfs")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/pbfs/pbfs/cmd/pbfs").CombinedOutput()
		if err != nil {
			return fmt.Errorf("build pbfs: %v\n%s", err, out)
		}
	} else {
		commit = "(pinned binary " + benchproc.ShownPath(bin) + "; tree now at " + commit + ")"
	}
	token := make([]byte, 16)
	rand.Read(token)
	tok := hex.EncodeToString(token)

	maxSize := slices.Max(cfg.sizes)
	data := makeData(cfg.data, 16<<20+maxSize)

	rep := &report{cfg: cfg, commit: commit, start: time.Now(), loadStart: benchproc.LoadAvg(), otherMounts: countPbfsMounts()}
	for _, d := range cfg.delays {
		if d > 0 {
			direct, proxied, err := delayproxy.Calibrate(d)
			if err != nil {
				return fmt.Errorf("calibrate the delay proxy: %w", err)
			}
			rep.calib = append(rep.calib, calib{d, direct, proxied})
			fmt.Fprintf(os.Stderr, "delay proxy %s: echo round trip p50 %s direct, %s through the proxy\n", d, direct, proxied)
		}
	}
	for round := 1; round <= cfg.rounds; round++ {
		if err := runRound(ctx, cfg, rep, round, bin, runDir, tok, data, &live); err != nil {
			return err
		}
	}
	rep.end = time.Now()
	rep.loadEnd = benchproc.LoadAvg()
	rep.leftMounts = mountsUnder(runDir)
	text := rep.markdown()
	fmt.Print(text)
	if cfg.resultsDir != "" {
		if err := os.MkdirAll(cfg.resultsDir, 0o755); err != nil {
			return err
		}
		p := filepath.Join(cfg.resultsDir, "replicate-"+rep.start.UTC().Format("2006-01-02-150405")+".md")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "replicate: report written to", p)
		if err := rep.summarize(cfg.resultsDir); err != nil {
			return err
		}
	}
	return nil
}

// runRound measures every point once: per delay, per backup count, one
// cluster that runs every write size in turn.
func runRound(ctx context.Context, cfg config, rep *report, round int, bin, runDir, tok string, data []byte, live *[]*cluster) error {
	for _, d := range cfg.delays {
		for _, n := range cfg.backups {
			c, err := startCluster(ctx, cfg, bin, filepath.Join(runDir, fmt.Sprint("r", round)), tok, n, d)
			*live = append(*live, c)
			if err != nil {
				return err
			}
			off := int64(0)
			for _, size := range cfg.sizes {
				r, err := runPoint(ctx, c, cfg, size, data, &off)
				if err != nil {
					return err
				}
				r.round = round
				if cfg.samplesDir != "" {
					if err := writeSamples(cfg.samplesDir, round, c.name, r); err != nil {
						return err
					}
				}
				rep.results = append(rep.results, r)
				fmt.Fprintf(os.Stderr, "round %d  %-14s %-14s %5d barriers  %7.0f/s  p50 %s  p99 %s\n",
					round, c.name, workload(size), len(r.lat), r.rate(), ms(r.pct(0.50)), ms(r.pct(0.99)))
			}
			// Every point ends with every batch applied on every backup.
			verr := c.verify()
			serr := c.stop()
			rep.complaints = append(rep.complaints, collectComplaints(c)...)
			if err := errors.Join(verr, serr); err != nil {
				return err
			}
			rep.verified = append(rep.verified, fmt.Sprintf("r%d/%s", round, c.name))
		}
	}
	return nil
}

func collectComplaints(c *cluster) []string {
	var out []string
	for _, p := range c.procs() {
		out = append(out, p.Complaints()...)
	}
	return out
}

// makeData returns n bytes for the writes to take slices of.
func makeData(kind string, n int) []byte {
	r := mrand.New(mrand.NewPCG(1, 2))
	if kind == "random" {
		b := make([]byte, n)
		for i := 0; i+8 <= n; i += 8 {
			v := r.Uint64()
			for k := 0; k < 8; k++ {
				b[i+k] = byte(v >> (8 * k))
			}
		}
		return b
	}
	var buf bytes.Buffer
	paths := []string{"/", "/wp-admin/post.php", "/wp-json/wp/v2/posts", "/feed", "/?p=123", "/wp-login.php"}
	for buf.Len() < n {
		fmt.Fprintf(&buf, "2026-11-30T13:%02d:%02d.%06dZ INFO request id=%08x method=GET path=%s status=200 bytes=%d dur_ms=%d\n",
			r.IntN(60), r.IntN(60), r.IntN(1000000), r.Uint32(), paths[r.IntN(len(paths))], r.IntN(90000), r.IntN(300))
	}
	return buf.Bytes()[:n]
}

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

func runPoint(ctx context.Context, c *cluster, cfg config, size int, data []byte, off *int64) (*result, error) {
	r := &result{delay: c.delay, backups: len(c.backups), size: size}
	rng := mrand.New(mrand.NewPCG(uint64(size), uint64(len(c.backups))))
	write := func() error {
		if size == 0 {
			return nil
		}
		src := rng.IntN(len(data) - size + 1)
		if _, err := c.file.WriteAt(data[src:src+size], *off); err != nil {
			return fmt.Errorf("%s: pwrite: %w", c.name, err)
		}
		*off = (*off + int64(size)) % (span - int64(size) + 1)
		return nil
	}
	var last uint64
	for i := 0; i < cfg.warmup; i++ {
		if err := write(); err != nil {
			return nil, err
		}
		seq, err := c.barrier(ctx)
		if err != nil {
			return nil, err
		}
		last = seq
	}
	if err := c.waitApplied(ctx, last); err != nil {
		return nil, err
	}
	m0, err := scrape(ctx, c)
	if err != nil {
		return nil, err
	}
	up0, down0 := proxyBytes(c)
	cpuP0, cpuB0 := c.cpu()
	start := time.Now()
	for time.Since(start) < cfg.duration && (cfg.maxN == 0 || len(r.lat) < cfg.maxN) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		t0 := time.Now()
		if err := write(); err != nil {
			return nil, err
		}
		t1 := time.Now()
		seq, err := c.barrier(ctx)
		if err != nil {
			return nil, err
		}
		t2 := time.Now()
		r.writeTime += t1.Sub(t0)
		r.lat = append(r.lat, t2.Sub(t1))
		r.starts = append(r.starts, t1.Sub(start))
		last = seq
	}
	r.elapsed = time.Since(start)
	cpuP1, cpuB1 := c.cpu()
	r.cpuP, r.cpuB = cpuP1.Minus(cpuP0), cpuB1.Minus(cpuB0)
	r.order = slices.Clone(r.lat)
	m1, err := scrape(ctx, c)
	if err != nil {
		return nil, err
	}
	up1, down1 := proxyBytes(c)
	r.m = m1.minus(m0)
	r.tcpUp, r.tcpDown = up1-up0, down1-down0
	slices.Sort(r.lat)
	// Let the backups finish applying before the next point starts.
	return r, c.waitApplied(ctx, last)
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

func proxyBytes(c *cluster) (up, down int64) {
	for _, p := range c.proxies {
		u, d := p.Bytes()
		up += u
		down += d
	}
	return up, down
}

// metrics maps a Prometheus series (name{labels}) to its value.
type metrics map[string]float64

// scrape reads the primary's metrics and every backup's, summed by series
// (a backup's series are named pbfs_backup_*, apart from the primary's).
func scrape(ctx context.Context, c *cluster) (metrics, error) {
	m := metrics{}
	for _, cl := range c.clients() {
		text, err := cl.Metrics(ctx)
		if err != nil {
			return nil, err
		}
		m = m.plus(parseMetrics(text))
	}
	return m, nil
}

func parseMetrics(text string) metrics {
	m := metrics{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m
}

func (m metrics) plus(o metrics) metrics {
	d := metrics{}
	for k, v := range m {
		d[k] = v
	}
	for k, v := range o {
		d[k] += v
	}
	return d
}

func (m metrics) minus(o metrics) metrics {
	d := metrics{}
	for k, v := range m {
		d[k] = v - o[k]
	}
	return d
}

// mean is a histogram's mean over the point, in ms, or "–".
func (m metrics) mean(name string) string {
	n := m.sum(name+"_count", "")
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f", m.sum(name+"_sum", "")/n*1e3)
}

// sum adds the series of metric name whose labels contain label.
func (m metrics) sum(name, label string) float64 {
	var s float64
	for k, v := range m {
		if (k == name || strings.HasPrefix(k, name+"{")) && strings.Contains(k, label) {
			s += v
		}
	}
	return s
}

func countPbfsMounts() int {
	data, _ := os.ReadFile("/proc/mounts")
	return strings.Count(string(data), " fuse.pbfs ")
}

func mountsUnder(dir string) []string {
	data, _ := os.ReadFile("/proc/mounts")
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && strings.HasPrefix(f[2], "fuse") && strings.HasPrefix(f[1], dir+"/") {
			out = append(out, f[1])
		}
	}
	return out
}

type calib struct {
	delay, direct, proxied time.Duration
}

type report struct {
	cfg                config
	commit             string
	start, end         time.Time
	loadStart, loadEnd string
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

func bytesStr(v float64) string {
	switch {
	case v >= 10<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case v >= 10<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	}
	return fmt.Sprintf("%.0f B", v)
}

func (rep *report) markdown() string {
	var b strings.Builder
	cfg := rep.cfg
	fmt.Fprintf(&b, "# Replication: barrier latency, %s\n\n", rep.start.UTC().Format("2006-01-02 15:04:05 UTC"))
	fmt.Fprintf(&b, "- command: `go run ./benchmarks/replicate %s`\n", benchproc.ShownArgs(os.Args[1:]))
	fmt.Fprintf(&b, "- pbfs: %s; %s, %d CPUs, kernel %s\n", rep.commit, runtime.Version(), runtime.NumCPU(), kernel())
	fmt.Fprintf(&b, "- %d round(s) of the whole matrix, samples pooled per point; in each, every point: %d warm-up barriers, then %s", cfg.rounds, cfg.warmup, cfg.duration)
	if cfg.maxN > 0 {
		fmt.Fprintf(&b, " or %d barriers, whichever comes first", cfg.maxN)
	}
	mode := "O_RDWR"
	if cfg.wronly {
		mode = "O_WRONLY"
	}
	fmt.Fprintf(&b, "; one writer (file open %s), write then barrier, in a closed loop; --ack all; data: %s\n", mode, cfg.data)
	fmt.Fprintf(&b, "- load average at start %s, at end %s; fuse.pbfs mounts of others at start: %d; run took %s\n",
		rep.loadStart, rep.loadEnd, rep.otherMounts, rep.end.Sub(rep.start).Round(time.Second))
	for _, c := range rep.calib {
		fmt.Fprintf(&b, "- delay proxy at %s each way: 64-byte echo round trip p50 %s ms direct, %s ms through the proxy (+%s ms; %s ms expected)\n",
			delayName(c.delay), ms(c.direct), ms(c.proxied), ms(c.proxied-c.direct), ms(2*c.delay))
	}
	fmt.Fprintf(&b, "\n## Barrier latency\n\n")
	fmt.Fprintf(&b, "Latency is from the barrier request on the control socket to its answer; the write before it is not\n")
	fmt.Fprintf(&b, "included. barriers/s counts the whole loop (write + barrier). The primary's own split of a barrier, as means:\n")
	fmt.Fprintf(&b, "commit = seal and durable journal append (`pbfs_journal_commit_seconds`, per batch), ack wait = from there until\n")
	fmt.Fprintf(&b, "the ack set holds the batch (`pbfs_replicate_barrier_seconds`, per barrier). Compare them with the mean, not the p50.\n\n")
	pts := rep.points()
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
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %.0f | %s | %s | %s | %s–%s | %s | %s | %s | %s |\n",
			workload(r.size), delayName(r.delay), r.backups, len(r.lat), r.rate(),
			ms(r.pct(0.5)), ms(r.pct(0.99)), ms(r.lat[len(r.lat)-1]), ms(r.p50s[0]), ms(r.p50s[len(r.p50s)-1]),
			ms(sum/time.Duration(len(r.lat))),
			r.m.mean("pbfs_journal_commit_seconds"), r.m.mean("pbfs_replicate_barrier_seconds"), pw)
	}
	writeBreakdown(&b, pts)
	fmt.Fprintf(&b, "\n## CPU per barrier\n\n")
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
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s | %s |\n", workload(r.size), delayName(r.delay), r.backups, len(r.lat),
			cpuStr(r.cpuP, n), bk, ms(r.cpuP.Plus(r.cpuB).Total()/n))
	}
	fmt.Fprintf(&b, "\n## Bytes per batch\n\n")
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
		fmt.Fprintf(&b, "| %s | %s | %d | %.0f | %.2f | %s | %s | %s | %s | %s | %s |\n",
			workload(r.size), delayName(r.delay), r.backups, batches, batches/float64(len(r.lat)),
			bytesStr(written), bytesStr(stored), sent, ratio, up, down)
	}
	fmt.Fprintf(&b, "\n## Checks\n\n")
	fmt.Fprintf(&b, "- backups' copy of the data file equal to the primary's after each configuration: %s\n", strings.Join(rep.verified, ", "))
	timer := 0.0
	for _, r := range rep.results {
		timer += r.m.sum("pbfs_capture_seals_total", `trigger="timer"`)
	}
	fmt.Fprintf(&b, "- batches sealed by the 50 ms timer rather than by a barrier during measurement: %.0f\n", timer)
	if len(rep.leftMounts) == 0 {
		fmt.Fprintf(&b, "- mounts left under the run directory: none\n")
	} else {
		fmt.Fprintf(&b, "- mounts left under the run directory: %v\n", rep.leftMounts)
	}
	if len(rep.complaints) == 0 {
		fmt.Fprintf(&b, "- pbfs log lines above INFO: none\n")
	} else {
		fmt.Fprintf(&b, "- pbfs log lines above INFO (%d):\n\n", len(rep.complaints))
		for i, l := range rep.complaints {
			if i == 30 {
				fmt.Fprintf(&b, "      ... %d more\n", len(rep.complaints)-30)
				break
			}
			fmt.Fprintf(&b, "      %s\n", l)
		}
	}
	return b.String()
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}
