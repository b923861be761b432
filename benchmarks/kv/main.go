// Command kv is a key-value stress in the shape of the Voldemort report in
// the project's seeds: 1 KiB values, an insert pass over every key, an
// update pass, then read passes that check every value, with per-phase
// throughput, latency and error rate. The store is a small service that
// keeps each key as a file (internal/testservice: write, fsync, rename),
// run side by side on
//
//   - plain:  a plain directory, clients talking to the service directly;
//   - bindfs: a multithreaded bindfs mount (a C FUSE passthrough) of a
//     plain directory, clients direct: what any FUSE file system costs the
//     service, the floor under pbfs's figures;
//   - pbfs-N: a pbfs mount replicating to N backups (--ack all), clients
//     going through the http-proxy plugin, every response held for its
//     barrier (output commit);
//   - pbfs-N-deferred: the same with --fsync deferred, the deployment the
//     docs give a service whose every client goes through the proxy: the
//     service's fsyncs return at once and the response's barrier makes its
//     writes durable on the backups;
//
// and once more as pbfs-1 with the mount (and so its proxy) under a
// lowered descriptor limit and more clients than it allows: the seed's
// lesson is that a server short of descriptors should keep serving, not
// crash, so that run must end with every process alive and its failures
// counted as 503s. Every process is real and runs on this machine. Run from
// the module root after make build:
//
//	go run ./benchmarks/kv -quick   # about 2 minutes
//	go run ./benchmarks/kv          # 100,000 keys: about 20 minutes
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
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
	bin, proxy, service string
	keys, value         int
	clients             int
	readPasses          int
	scenarios           []string
	fdLimit             int // 0: no lowered-limit run
	fdClients           int
	curveClients        []int
	curveKeys           int
	workdir, resultsDir string
	mountArgs           []string
}

func main() {
	var cfg config
	var scenarios string
	quick := flag.Bool("quick", false, "10,000 keys and 2 read passes, for a run of a few minutes")
	flag.StringVar(&cfg.bin, "bin", "bin/pbfs", "pbfs binary")
	flag.StringVar(&cfg.proxy, "proxy", "bin/http-proxy", "http-proxy plugin binary")
	flag.IntVar(&cfg.keys, "keys", 100000, "keys per pass")
	flag.IntVar(&cfg.value, "value", 1024, "bytes per value")
	flag.IntVar(&cfg.clients, "clients", 32, "concurrent clients, each with its own kept-alive connection")
	flag.IntVar(&cfg.readPasses, "reads", 3, "read passes after the update pass")
	flag.StringVar(&scenarios, "scenarios", "plain,bindfs,pbfs-0,pbfs-1,pbfs-1-deferred,pbfs-2,pbfs-2-deferred,pbfs-2-delay", "scenarios to run, in order (bindfs: the service on a C FUSE passthrough, skipped when bindfs is not installed; pbfs-N-delay: 0.5 ms added each way on every backup's link; pbfs-N-deferred: the mount with --fsync deferred)")
	flag.IntVar(&cfg.fdLimit, "fd-limit", 256, "descriptor limit (soft and hard) of the mount and its proxy in the lowered-limit run; 0 skips that run")
	flag.IntVar(&cfg.fdClients, "fd-clients", 512, "concurrent clients in the lowered-limit run")
	flag.StringVar(&cfg.workdir, "workdir", "/var/tmp", "where the run's directory is made (not a tmpfs)")
	flag.StringVar(&cfg.resultsDir, "results-dir", "benchmarks/results", "where kv-<date>.md and summary.json are written (empty: stdout only)")
	curve := flag.String("curve-clients", "1,4,16,64", "client counts of the update curve (latency against throughput)")
	flag.IntVar(&cfg.curveKeys, "curve-keys", 2000, "keys updated at each client count of the curve (0: no curve)")
	mountArgs := flag.String("mount-args", "", "extra flags for `pbfs mount`, space-separated (for example --admin=127.0.0.1:6060 for pprof)")
	flag.Parse()
	cfg.mountArgs = strings.Fields(*mountArgs)
	for _, f := range strings.Split(*curve, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "kv: -curve-clients: %q\n", f)
			os.Exit(2)
		}
		cfg.curveClients = append(cfg.curveClients, n)
	}
	if *quick {
		cfg.keys, cfg.readPasses, cfg.curveKeys = 10000, 2, 500
	}
	var err error
	if cfg.scenarios, err = parseScenarios(scenarios); err != nil {
		fmt.Fprintln(os.Stderr, "kv:", err)
		os.Exit(2)
	}
	if cfg.keys < 1 || cfg.value < 1 || cfg.clients < 1 {
		fmt.Fprintln(os.Stderr, "kv: -keys, -value and -clients must be positive")
		os.Exit(2)
	}
	fsName, err := prologue.Workdir(cfg.workdir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kv:", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	err = run(ctx, cfg, fsName)
	cancel()
	prologue.Exit("kv", err)
}

func run(ctx context.Context, cfg config, fsName string) error {
	start := time.Now()
	svc, err := buildService(cfg.workdir)
	if err != nil {
		return err
	}
	defer os.Remove(svc)
	cfg.service = svc
	rep := &kvReport{cfg: cfg, start: start, load0: benchproc.LoadAvg(), commit: benchproc.Commit(), fs: fsName}
	for _, name := range cfg.scenarios {
		fmt.Printf("== %s\n", name)
		res, err := runScenario(ctx, cfg, name, shapeOf(name), 0, cfg.clients, cfg.keys, cfg.readPasses)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rep.runs = append(rep.runs, res)
	}
	if cfg.fdLimit > 0 {
		fmt.Printf("== pbfs-1 under a descriptor limit of %d, %d clients\n", cfg.fdLimit, cfg.fdClients)
		res, err := runScenario(ctx, cfg, "pbfs-1-fd-limit", shape{backups: 1}, cfg.fdLimit, cfg.fdClients, max(1, min(5000, cfg.keys/5)), 1)
		if err != nil {
			return fmt.Errorf("lowered descriptor limit: %w", err)
		}
		rep.fd = res
	}
	rep.end, rep.load1 = time.Now(), benchproc.LoadAvg()
	return rep.write(cfg.resultsDir)
}

// bindfsScenario names the floor: the service on a bindfs mount.
const bindfsScenario = "bindfs"

// parseScenarios checks -scenarios, and leaves bindfs out (saying so)
// when it is not installed.
func parseScenarios(list string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		if s == bindfsScenario {
			if _, err := exec.LookPath("bindfs"); err != nil {
				fmt.Println("kv: bindfs is not installed (apt-get install bindfs): running without its scenario")
				continue
			}
		} else if err := checkScenario(s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// shape is what a scenario's name asks for.
type shape struct {
	backups  int // -1: no pbfs
	delay    time.Duration
	deferred bool // the mount runs with --fsync deferred
}

// checkScenario reads a pbfs scenario's name: pbfs-N, pbfs-N-delay or
// pbfs-N-deferred.
func checkScenario(name string) error {
	base, deferred := strings.CutSuffix(name, "-deferred")
	n, _, err := report.ParseScenario(base)
	if err != nil {
		return fmt.Errorf("%w, pbfs-N-deferred or bindfs", err)
	}
	if deferred && n < 0 {
		return fmt.Errorf("scenario %q: plain has no mount to defer fsyncs in", name)
	}
	return nil
}

// shapeOf returns a checked scenario's shape.
func shapeOf(name string) shape {
	if name == bindfsScenario {
		return shape{backups: -1}
	}
	base, deferred := strings.CutSuffix(name, "-deferred")
	backups, delay, _ := report.ParseScenario(base)
	return shape{backups: backups, delay: delay, deferred: deferred}
}
