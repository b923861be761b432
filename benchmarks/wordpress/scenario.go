package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/cluster"
	"github.com/pbfs/pbfs/benchmarks/internal/report"
)

// point is one measurement: the closed-loop peak or an open-loop rate.
type point struct {
	offered   float64 // requests per second offered; 0 for the closed loop
	rate      float64 // successful editPosts per second
	ok, fail  int
	lat       []time.Duration // successful ones, sorted
	cpuWeb    benchproc.CPU   // nginx and php-fpm
	cpuDB     benchproc.CPU
	cpuMount  benchproc.CPU // the mount with its proxy and flush helper
	cpuBackup benchproc.CPU // all backups
	shipped   float64       // bytes sent to backups (each backup counted)
	stored    float64       // bytes the primary's journal stored
	batches   float64
	client    float64       // vCPUs the load generator itself used
	lateP99   time.Duration // open loop: p99 of how late requests were sent
}

type scenarioRun struct {
	name     string
	round    int // 1-based (-rounds)
	backups  int
	peak     *point
	points   []*point
	verified string
}

// Suffixes of a pbfs scenario's name, in any order: directSuffix, clients
// bypass the proxy; deferredSuffix, the mount runs with --fsync deferred;
// ack1MemorySuffix, it runs with --ack 1 --ack-level memory (a barrier
// returns once one backup has received and checked its batches, as
// semi-sync's commit returns once one replica has received its events).
const (
	directSuffix     = "-direct"
	deferredSuffix   = "-deferred"
	ack1MemorySuffix = "-ack1-memory"
)

// variant is what a scenario's suffixes ask of its mount and clients.
type variant struct {
	direct, deferred, ack1Memory bool
}

// storageOf is a scenario's name without those suffixes (the storage
// report.ParseScenario reads) and what they ask.
func storageOf(name string) (string, variant) {
	var v variant
	suffixes := []struct {
		suffix string
		set    *bool
	}{{directSuffix, &v.direct}, {deferredSuffix, &v.deferred}, {ack1MemorySuffix, &v.ack1Memory}}
	for cut := true; cut; {
		cut = false
		for _, s := range suffixes {
			if base, ok := strings.CutSuffix(name, s.suffix); ok && !*s.set {
				name, *s.set, cut = base, true, true
			}
		}
	}
	return name, v
}

// storageName is storageOf's name alone.
func storageName(name string) string {
	n, _ := storageOf(name)
	return n
}

// runScenario sets up a fresh site on the scenario's storage, seeds it,
// measures the peak and the open-loop points, and tears it down.
func runScenario(ctx context.Context, cfg config, name string, backups int, delay time.Duration, plainPeak float64) (*scenarioRun, error) {
	dir, err := os.MkdirTemp(cfg.workdir, "pbfs-wp-"+name+"-")
	if err != nil {
		return nil, err
	}
	var mount *benchproc.Proc
	var bk []*benchproc.Proc
	var cl *cluster.Cluster
	var admin string
	var tok [16]byte
	rand.Read(tok[:])
	env := []string{"PBFS_TOKEN=" + hex.EncodeToString(tok[:])}
	vol := filepath.Join(dir, "vol")
	os.Mkdir(vol, 0o755)
	var s *site
	cleanup := func(keep bool) error {
		var errs []string
		if s != nil {
			for _, err := range s.stop() {
				errs = append(errs, err.Error())
			}
		}
		if err := cl.Stop(); err != nil {
			errs = append(errs, err.Error())
		}
		for _, m := range benchproc.MountsUnder(dir) {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
		if !keep && len(errs) == 0 {
			os.RemoveAll(dir)
		}
		if len(errs) > 0 {
			return fmt.Errorf("stopping %s (logs in %s): %s", name, dir, strings.Join(errs, "; "))
		}
		return nil
	}
	fail := func(err error) (*scenarioRun, error) {
		cleanup(true)
		return nil, fmt.Errorf("%w (logs kept in %s)", err, dir)
	}
	run := filepath.Join(dir, "run")
	siteName := "pbfs-bench-" + name
	nginx, err := benchproc.FreeAddr()
	if err != nil {
		return fail(err)
	}
	target := "http://" + nginx
	if backups >= 0 {
		proxy, err := benchproc.FreeAddr()
		if err != nil {
			return fail(err)
		}
		if admin, err = benchproc.FreeAddr(); err != nil {
			return fail(err)
		}
		args := []string{"--admin", admin, "--plugin", "http-proxy=" + cfg.proxy,
			"--plugin-config", fmt.Sprintf("http-proxy:listen=%s,upstream=http://%s", proxy, nginx)}
		_, v := storageOf(name)
		direct := v.direct
		if direct {
			args = args[:2]
		}
		if v.deferred {
			args = append(args, "--fsync", "deferred")
		}
		ccfg := cluster.Config{Bin: cfg.bin, Dir: dir, Vol: vol, Backups: backups, Delay: delay, Env: env, Args: args}
		if v.ack1Memory {
			ccfg.Ack, ccfg.AckLevel = "1", "memory"
		}
		c, err := cluster.Start(ctx, ccfg)
		cl = c
		if err != nil {
			return fail(err)
		}
		mount, bk = c.Mount, c.Backups
		if !direct {
			target = "http://" + proxy
		}
	}
	replicas := 0
	if name == semisyncScenario {
		replicas = 2
	}
	s, err = startSiteAt(ctx, siteName, run, filepath.Join(vol, "mysql"), nginx, cfg.fpm, replicas)
	if err != nil {
		return fail(err)
	}
	if mount != nil && target != "http://"+nginx {
		if err := benchproc.WaitListening(ctx, mount, strings.TrimPrefix(target, "http://")); err != nil {
			return fail(err)
		}
	}
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute}}
	ids, err := seedPosts(ctx, client, target, cfg.posts)
	if err != nil {
		return fail(err)
	}
	e := &editor{c: client, target: target, ids: ids}
	e.closedLoop(ctx, cfg.clients, 3*time.Second) // warm up
	r := &scenarioRun{name: name, backups: backups}
	measure := func(offered float64, do func() []sample) *point {
		web0, db0 := s.cpu()
		m0, b0 := mount.CPU(), cpuOf(bk).Plus(s.replicaCPU())
		met0 := benchproc.Scrape(admin)
		self0 := benchproc.SelfCPU()
		t0 := time.Now()
		samples := do()
		el := time.Since(t0)
		client := float64(benchproc.SelfCPU().Minus(self0).Total()) / float64(el)
		web1, db1 := s.cpu()
		m1, b1 := mount.CPU(), cpuOf(bk).Plus(s.replicaCPU())
		met1 := benchproc.Scrape(admin)
		p := &point{offered: offered, cpuWeb: web1.Minus(web0), cpuDB: db1.Minus(db0), cpuMount: m1.Minus(m0), cpuBackup: b1.Minus(b0),
			shipped: met1["pbfs_replicate_bytes_sent_total"] - met0["pbfs_replicate_bytes_sent_total"],
			stored:  met1[`pbfs_journal_bytes_total{stage="stored"}`] - met0[`pbfs_journal_bytes_total{stage="stored"}`],
			batches: met1["pbfs_journal_batches_total"] - met0["pbfs_journal_batches_total"], client: client}
		var late []time.Duration
		for _, sm := range samples {
			late = append(late, sm.late)
			if sm.ok {
				p.ok++
				p.lat = append(p.lat, sm.lat)
			} else {
				p.fail++
			}
		}
		slices.Sort(p.lat)
		slices.Sort(late)
		if offered > 0 && len(late) > 0 {
			p.lateP99 = late[len(late)*99/100]
		}
		p.rate = float64(p.ok) / el.Seconds()
		fmt.Printf("  offered %6.1f/s: %6.1f ok/s  p50 %7.1f ms  p99 %7.1f ms  failed %d\n", offered, p.rate,
			report.Pct(p.lat, 0.5), report.Pct(p.lat, 0.99), p.fail)
		return p
	}
	// Said before it starts, for a profiler to start with it.
	fmt.Printf("  peak: %d editors for %v\n", cfg.clients, cfg.peakFor)
	r.peak = measure(0, func() []sample { return e.closedLoop(ctx, cfg.clients, cfg.peakFor) })
	if plainPeak == 0 {
		plainPeak = r.peak.rate
	}
	for i, f := range cfg.fractions {
		rate := f * plainPeak
		r.points = append(r.points, measure(rate, func() []sample { return e.openLoop(ctx, rate, cfg.pointFor, uint64(i+1)) }))
	}
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}
	// Semi-sync's replicas must hold what the primary does.
	r.verified = "no backups"
	if replicas > 0 {
		if err := s.dbs.converged(ctx); err != nil {
			return fail(err)
		}
		r.verified = "replicas' tables identical to the primary's (CHECKSUM TABLE)"
	}
	// The database stops cleanly first; then every backup must hold
	// exactly the primary's volume.
	for _, err := range s.stop() {
		return fail(err)
	}
	s = nil
	if backups > 0 {
		if r.verified, err = cl.Verify(); err != nil {
			return fail(err)
		}
	}
	return r, cleanup(false)
}

// semisyncScenario is MariaDB's own semi-synchronous replication to two
// replicas, on plain directories, clients talking to nginx directly.
const semisyncScenario = "semisync"

func cpuOf(ps []*benchproc.Proc) benchproc.CPU {
	var c benchproc.CPU
	for _, p := range ps {
		c = c.Plus(p.CPU())
	}
	return c
}
