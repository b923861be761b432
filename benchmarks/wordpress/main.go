// Command wordpress measures the reference system's headline workload:
// WordPress XML-RPC wp.editPost, on Debian's wordpress, php-fpm and nginx,
// with MariaDB's data directory on
//
//   - plain:  a plain directory, clients talking to nginx directly;
//   - pbfs-N: a pbfs mount replicating to N backups (--ack all), clients
//     going through the http-proxy plugin (every response held for its
//     barrier);
//   - pbfs-N-direct: the same mount, clients talking to nginx directly:
//     no output commit, so not a setup to run a service on, but it tells
//     the storage's cost from the proxy's;
//   - pbfs-N-deferred: pbfs-N with --fsync deferred: MariaDB's fsyncs
//     return at once and the proxy's barriers alone make its commits
//     durable (docs/ARCHITECTURE.md, "Fsync policies");
//   - pbfs-N-ack1-memory (combinable with -deferred): pbfs-N with --ack 1
//     --ack-level memory, a barrier done once one backup has received
//     and checked its batches: semi-sync's own guarantee (AFTER_SYNC with
//     one replica to wait for and an unsynced relay log).
//
// Each scenario gets a fresh site with 200 seeded posts. A closed loop of
// -clients editors finds its peak; then an open-loop Poisson client posts
// wp.editPost round-robin at fixed fractions of plain's peak, so the
// scenarios' latencies compare at the same offered load. CPU per request
// per process and journal bytes shipped per request come with every
// figure. It installs what it needs with apt-get when given -install.
// Run from the module root after make build:
//
//	go run ./benchmarks/wordpress -install -quick   # about 5 minutes
//	go run ./benchmarks/wordpress                   # about 12 minutes
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/prologue"
	"github.com/pbfs/pbfs/benchmarks/internal/report"
)

type config struct {
	bin, proxy          string
	scenarios           []string
	fractions           []float64
	clients, posts      int
	fpm                 int
	peakFor, pointFor   time.Duration
	workdir, resultsDir string
	install             bool
	rounds              int
}

func main() {
	var cfg config
	var scenarios, fractions string
	quick := flag.Bool("quick", false, "10 s per measurement instead of 30 s")
	flag.StringVar(&cfg.bin, "bin", "bin/pbfs", "pbfs binary")
	flag.StringVar(&cfg.proxy, "proxy", "bin/http-proxy", "http-proxy plugin binary")
	flag.StringVar(&scenarios, "scenarios", "plain,pbfs-0,pbfs-1-deferred,pbfs-2-deferred,pbfs-2-deferred-ack1-memory,pbfs-2,semisync", "scenarios to run, plain first (pbfs-N-delay: 0.5 ms added each way on every backup's link; pbfs-N-direct: clients talk to nginx directly, without the proxy and its output commit, which shows the storage's own cost; pbfs-N-deferred: the mount with --fsync deferred; pbfs-N-ack1-memory: with --ack 1 --ack-level memory, semi-sync's guarantee; semisync: MariaDB's semi-sync replication to two replicas)")
	flag.StringVar(&fractions, "fractions", "0.5,0.7,0.9", "offered loads of the open-loop points, as fractions of plain's peak")
	flag.IntVar(&cfg.clients, "clients", 8, "editors in the closed loop that finds the peak")
	flag.IntVar(&cfg.rounds, "rounds", 1, "times every scenario runs, plain first in each round and the others in a rotated order; with more than one, the report leads with each scenario's medians")
	flag.IntVar(&cfg.posts, "posts", 200, "posts seeded and edited round-robin")
	flag.IntVar(&cfg.fpm, "fpm-children", 8, "php-fpm workers")
	flag.DurationVar(&cfg.peakFor, "peak-for", 30*time.Second, "length of the closed-loop peak measurement")
	flag.DurationVar(&cfg.pointFor, "point-for", 30*time.Second, "length of each open-loop point")
	flag.StringVar(&cfg.workdir, "workdir", "/var/tmp", "where the run's directory is made (not a tmpfs)")
	flag.StringVar(&cfg.resultsDir, "results-dir", "benchmarks/results", "where wordpress-<date>.md and summary.json are written (empty: stdout only)")
	flag.BoolVar(&cfg.install, "install", false, "apt-get install the packages the site needs when missing")
	flag.Parse()
	if *quick {
		cfg.peakFor, cfg.pointFor = 10*time.Second, 10*time.Second
	}
	cfg.scenarios = strings.Split(scenarios, ",")
	var err error
	for _, f := range strings.Split(fractions, ",") {
		v, perr := strconv.ParseFloat(f, 64)
		if perr != nil || v <= 0 || v > 2 {
			err = fmt.Errorf("-fractions: %q", f)
		}
		cfg.fractions = append(cfg.fractions, v)
	}
	for _, s := range cfg.scenarios {
		if _, _, perr := report.ParseScenario(storageName(s)); perr != nil && s != semisyncScenario {
			err = perr
		}
	}
	if err == nil && cfg.rounds < 1 {
		err = fmt.Errorf("-rounds %d: want 1 or more", cfg.rounds)
	}
	if err == nil && cfg.scenarios[0] != "plain" {
		err = fmt.Errorf("-scenarios must start with plain: the open-loop rates are fractions of its peak")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wordpress:", err)
		os.Exit(2)
	}
	if err := ensurePackages(cfg.install); err != nil {
		fmt.Fprintln(os.Stderr, "wordpress:", err)
		os.Exit(1)
	}
	fsName, err := prologue.Workdir(cfg.workdir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wordpress:", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	err = run(ctx, cfg, fsName)
	cancel()
	prologue.Exit("wordpress", err)
}

func run(ctx context.Context, cfg config, fsName string) error {
	rep := &wpReport{cfg: cfg, start: time.Now(), load0: benchproc.LoadAvg(), commit: benchproc.Commit(), fs: fsName,
		cal0: benchproc.Calibrate(cfg.workdir)}
	for round := 1; round <= cfg.rounds; round++ {
		var plainPeak float64
		for _, name := range roundOrder(cfg.scenarios, round) {
			n, delay, _ := report.ParseScenario(storageName(name))
			if name == semisyncScenario {
				n = -1 // no pbfs: plain directories, clients direct
			}
			fmt.Printf("== %s (round %d of %d)\n", name, round, cfg.rounds)
			res, err := runScenario(ctx, cfg, name, n, delay, plainPeak)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", name, round, err)
			}
			res.round = round
			if name == "plain" {
				plainPeak = res.peak.rate
			}
			rep.runs = append(rep.runs, res)
		}
	}
	rep.end, rep.load1, rep.cal1 = time.Now(), benchproc.LoadAvg(), benchproc.Calibrate(cfg.workdir)
	return rep.write(cfg.resultsDir)
}
