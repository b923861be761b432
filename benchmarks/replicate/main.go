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
	"errors"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/delayproxy"
	"github.com/pbfs/pbfs/benchmarks/internal/prologue"
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
	viaFsync   bool     // each barrier is the writer's fsync under --fsync replicated, not a control-socket request
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
	via := flag.String("via", "control", "how the writer asks for each barrier: control (the control socket, as `pbfs barrier` does) or fsync (fsync(2) of the file, with the mount's --fsync replicated: a database's replicated commit)")
	flag.Parse()
	cfg.mountArgs, cfg.backupArgs = strings.Fields(mountArgs), strings.Fields(backupArgs)
	cfg.viaFsync = *via == "fsync"
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
	if err == nil && *via != "control" && *via != "fsync" {
		err = fmt.Errorf("-via %q: want control or fsync", *via)
	}
	if err != nil {
		prologue.Usage("replicate", err)
	}
	prologue.Exit("replicate", run(cfg))
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
	r, err := prologue.Begin("replicate", cfg.workdir, "pbfs-repl.")
	if err != nil {
		return err
	}
	ctx, runDir := r.Ctx, r.Dir
	var live []*pcluster
	defer func() {
		// Stop whatever is still running, whatever happened.
		for _, c := range live {
			if e := c.stop(); e != nil {
				err = errors.Join(err, e)
			}
		}
		r.End(&err, cfg.keep)
	}()
	bin, commit, err := r.Binary(cfg.bin)
	if err != nil {
		return err
	}
	tok := prologue.Token()

	maxSize := slices.Max(cfg.sizes)
	data := makeData(cfg.data, 16<<20+maxSize)

	rep := &report{cfg: cfg, commit: commit, start: time.Now(), loadStart: benchproc.LoadAvg(), otherMounts: prologue.PbfsMounts(), calStart: benchproc.Calibrate(runDir)}
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
	rep.calEnd = benchproc.Calibrate(runDir)
	rep.leftMounts = benchproc.MountsUnder(runDir)
	text := rep.markdown()
	fmt.Print(text)
	if cfg.resultsDir != "" {
		if _, err := prologue.WriteReport(cfg.resultsDir, "replicate", rep.start, text); err != nil {
			return err
		}
		if err := rep.summarize(cfg.resultsDir); err != nil {
			return err
		}
	}
	return nil
}

// runRound measures every point once: per delay, per backup count, one
// cluster that runs every write size in turn.
func runRound(ctx context.Context, cfg config, rep *report, round int, bin, runDir, tok string, data []byte, live *[]*pcluster) error {
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
			rep.complaints = append(rep.complaints, c.Complaints()...)
			if err := errors.Join(verr, serr); err != nil {
				return err
			}
			rep.verified = append(rep.verified, fmt.Sprintf("r%d/%s", round, c.name))
		}
	}
	return nil
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
