package main

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// config is one sweep's settings.
type config struct {
	seed     uint64
	rounds   int           // fault rounds at most (0: until duration)
	duration time.Duration // the faults' time at most
	short    bool          // holds capped at the lease plus a second, a primary awaited after each round
	members  int           // etcd members
	bin      string        // the pbfs binary ("": built, as the tests build it)
	nodeArgs []string      // more `pbfs node` flags
}

// shortConfig is the sweep CI runs: about a minute.
func shortConfig(seed uint64) config {
	return config{seed: seed, rounds: 6, duration: 45 * time.Second, short: true, members: 1}
}

// sweep runs the fault sweep cfg describes, with the nodes' volumes,
// journals and logs in dir, prints what it does to out and returns the
// violations it found. It reports trouble with its own machinery through
// t: the Go test's, or the program's (tb.go).
func sweep(t testing.TB, cfg config, dir string, out io.Writer) []string {
	fstest.RequireFUSE(t)
	bin := cfg.bin
	if bin == "" {
		bin = fstest.Binary(t)
	}
	fmt.Fprintf(out, "faultsweep: seed %d, up to %d rounds in %v, %d etcd member(s), 3 nodes, in %s\n", cfg.seed, cfg.rounds, cfg.duration, cfg.members, dir)
	c := startCluster(t, bin, dir, cfg.members, 3, cfg.nodeArgs)
	start := time.Now()
	if c.awaitPrimary(60*time.Second) == nil {
		t.Fatalf("no primary was elected:\n%s", c.logTails(20))
	}
	l := newLedger()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	w := &writer{nodes: c.nodes, seed: cfg.seed, l: l}
	go func() { defer close(done); w.run(ctx) }()
	in := &injector{c: c, rng: mrand.New(mrand.NewPCG(cfg.seed, 0x5eed)), start: start, short: cfg.short}
	for r := 1; (cfg.rounds == 0 || r <= cfg.rounds) && time.Since(start) < cfg.duration; r++ {
		for _, f := range in.round() {
			fmt.Fprintf(out, "round %3d %s\n", r, f)
		}
		in.settle()
	}
	sleep(ctx, time.Second) // writes acknowledged after the last fault
	cancel()
	<-done
	fmt.Fprintf(out, "faults done after %v; ledger: %s\n", time.Since(start).Round(100*time.Millisecond), l.summary())
	p, bad := c.verdict(l)
	fmt.Fprintf(out, "faults: %s\n", countKinds(in.done))
	if p != nil {
		fmt.Fprintf(out, "primary at the end: %s; %d acknowledged writes checked on it, %d backups compared byte for byte\n", p.name, len(l.acked), len(c.nodes)-1)
	}
	if len(bad) > 0 {
		fmt.Fprintf(out, "node logs, last lines:\n%s", c.logTails(15))
	}
	return bad
}

// settle gives the cluster time between rounds: in short mode, and in
// two rounds of three, until a primary acknowledges (at most 30 s), then
// a drawn pause; in the others the next round may find an election under
// way.
func (in *injector) settle() {
	if in.short || in.rng.IntN(3) != 0 {
		in.c.awaitPrimary(30 * time.Second)
	}
	d := in.draw(200*time.Millisecond, 3*time.Second)
	if in.short {
		d = 300 * time.Millisecond
	}
	time.Sleep(d)
}

// countKinds is how many faults of each kind a sweep injected.
func countKinds(fs []*fault) string {
	n := map[string]int{}
	for _, f := range fs {
		n[f.kind]++
	}
	var parts []string
	for k, v := range n {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d (%s)", len(fs), strings.Join(parts, ", "))
}
