// Command faultsweep sweeps pbfs's elections with faults: it starts a real
// etcd (internal/etcdtest) and three `pbfs node` processes, writes new
// files through whichever node is the primary, and keeps a ledger of every
// write a barrier acknowledged, with its bytes. Meanwhile it injects
// faults on a schedule drawn from -seed: kill -9, SIGSTOP and SIGCONT, and
// SIGTERM of the primary's node or a backup's, kill -9 and restart of an
// etcd member (all of etcd with one), etcd's leader frozen past the lease;
// one in four rounds holds two faults at once. At the end it waits for one
// primary and for the others to converge on it, and checks that
//
//   - exactly one node says it is the primary, and etcd names it;
//   - every acknowledged write is on it, with its exact bytes;
//   - every backup's tree equals the primary's, byte for byte
//     (benchmarks/internal/treecmp, as the tests compare).
//
// It prints the faults, the ledger and the verdict, and exits 1 on any
// violation, keeping its directory (node logs, volumes, journals, etcd's
// data) and printing its path. Run from the module root, as root, with
// /dev/fuse:
//
//	go run ./benchmarks/faultsweep -short                  # about a minute: what CI runs (sweep_test.go)
//	go run ./benchmarks/faultsweep -duration 30m -seed 7   # a long sweep of a change to elections
//	go run ./benchmarks/faultsweep -h                      # the settings
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

func main() {
	cfg := config{members: 3}
	flag.Uint64Var(&cfg.seed, "seed", uint64(time.Now().UnixNano()%1e6), "seed of the fault schedule and of the written bytes (default: drawn, and printed)")
	flag.IntVar(&cfg.rounds, "rounds", 0, "fault rounds at most (0: until -duration)")
	flag.DurationVar(&cfg.duration, "duration", 10*time.Minute, "how long faults are injected at most")
	flag.BoolVar(&cfg.short, "short", false, "the short sweep CI runs: 6 rounds in at most 45 s, one etcd member, holds capped (other flags given still apply)")
	flag.IntVar(&cfg.members, "etcd", 3, "etcd members")
	flag.StringVar(&cfg.bin, "bin", "", "pbfs binary (default: built with failpoints, as the tests build it)")
	workdir := flag.String("workdir", "/var/tmp", "where the run's directory is created")
	keep := flag.Bool("keep", false, "keep the run's directory when the sweep passes too")
	nodeArgs := flag.String("node-args", "", "more `pbfs node` flags, space-separated (for example --ack all)")
	flag.Parse()
	if cfg.short {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		s := shortConfig(cfg.seed)
		s.bin = cfg.bin
		if set["rounds"] {
			s.rounds = cfg.rounds
		}
		if set["duration"] {
			s.duration = cfg.duration
		}
		if set["etcd"] {
			s.members = cfg.members
		}
		cfg = s
	}
	cfg.nodeArgs = strings.Fields(*nodeArgs)
	if cfg.members < 1 || cfg.duration <= 0 || cfg.rounds < 0 {
		fmt.Fprintln(os.Stderr, "faultsweep: -etcd must be at least 1, -duration positive, -rounds not negative")
		os.Exit(2)
	}
	os.Exit(run(cfg, *workdir, *keep))
}

// run sweeps in a new directory under workdir and returns the exit code.
func run(cfg config, workdir string, keep bool) int {
	dir, err := os.MkdirTemp(workdir, "pbfs-faultsweep.")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faultsweep:", err)
		return 1
	}
	t := &programTB{dir: dir}
	var bad []string
	start := time.Now()
	err = t.run(func() { bad = sweep(t, cfg, filepath.Join(dir, "nodes"), os.Stdout) })
	t.cleanup()
	t.run(func() { os.RemoveAll(filepath.Dir(fstest.Build(t, "github.com/pbfs/pbfs/internal/etcdtest/testetcd"))) })
	if cfg.bin == "" {
		t.run(func() { os.RemoveAll(filepath.Dir(fstest.Binary(t))) })
	}
	took := time.Since(start).Round(time.Second)
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "faultsweep: seed %d: FAILED to run after %v: %v\nfaultsweep: kept %s\n", cfg.seed, took, err, dir)
		return 1
	case len(bad) > 0:
		fmt.Printf("VERDICT: %d violation(s), seed %d, after %v:\n  %s\n", len(bad), cfg.seed, took, strings.Join(bad[:min(50, len(bad))], "\n  "))
		fmt.Fprintf(os.Stderr, "faultsweep: kept %s\n", dir)
		return 1
	}
	fmt.Printf("VERDICT: ok, seed %d, after %v\n", cfg.seed, took)
	if keep || t.Failed() {
		fmt.Fprintf(os.Stderr, "faultsweep: kept %s\n", dir)
	} else {
		os.RemoveAll(dir)
	}
	return 0
}
