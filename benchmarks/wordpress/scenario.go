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
	st := &stack{name: name, dir: dir, vol: filepath.Join(dir, "vol")}
	os.Mkdir(st.vol, 0o755)
	if err := st.startStorage(ctx, cfg, backups, delay); err != nil {
		return st.fail(err)
	}
	replicas := 0
	if name == semisyncScenario {
		replicas = 2
	}
	if err := st.startSite(ctx, cfg, replicas); err != nil {
		return st.fail(err)
	}
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute}}
	ids, err := seedPosts(ctx, client, st.target, cfg.posts)
	if err != nil {
		return st.fail(err)
	}
	e := &editor{c: client, target: st.target, ids: ids}
	e.closedLoop(ctx, cfg.clients, 3*time.Second) // warm up
	r := &scenarioRun{name: name, backups: backups}
	// Said before it starts, for a profiler to start with it.
	fmt.Printf("  peak: %d editors for %v\n", cfg.clients, cfg.peakFor)
	r.peak = st.measure(0, func() []sample { return e.closedLoop(ctx, cfg.clients, cfg.peakFor) })
	if plainPeak == 0 {
		plainPeak = r.peak.rate
	}
	for i, f := range cfg.fractions {
		rate := f * plainPeak
		r.points = append(r.points, st.measure(rate, func() []sample { return e.openLoop(ctx, rate, cfg.pointFor, uint64(i+1)) }))
	}
	if ctx.Err() != nil {
		return st.fail(ctx.Err())
	}
	if r.verified, err = st.verify(ctx, replicas, backups); err != nil {
		return st.fail(err)
	}
	return r, st.cleanup(false)
}

// stack is what one scenario runs: its directory, the pbfs cluster under
// the database's storage (none for a plain one), and the site.
type stack struct {
	name     string
	dir, vol string
	cl       *cluster.Cluster
	mount    *benchproc.Proc
	bk       []*benchproc.Proc
	admin    string // the mount's admin address, for its metrics
	nginx    string // host:port
	target   string // the URL clients send to: nginx, or the proxy in front of it
	s        *site
}

// cleanup stops the site and the cluster and removes the directory unless
// keep is set or something did not stop cleanly.
func (st *stack) cleanup(keep bool) error {
	var errs []string
	if st.s != nil {
		for _, err := range st.s.stop() {
			errs = append(errs, err.Error())
		}
	}
	if err := st.cl.Stop(); err != nil {
		errs = append(errs, err.Error())
	}
	for _, m := range benchproc.MountsUnder(st.dir) {
		syscall.Unmount(m, syscall.MNT_DETACH)
	}
	if !keep && len(errs) == 0 {
		os.RemoveAll(st.dir)
	}
	if len(errs) > 0 {
		return fmt.Errorf("stopping %s (logs in %s): %s", st.name, st.dir, strings.Join(errs, "; "))
	}
	return nil
}

// fail cleans up, keeping the directory, and returns err.
func (st *stack) fail(err error) (*scenarioRun, error) {
	st.cleanup(true)
	return nil, fmt.Errorf("%w (logs kept in %s)", err, st.dir)
}

// startStorage picks nginx's address and, for a pbfs scenario (backups
// >= 0), starts the cluster on the volume, with the HTTP proxy in front
// of nginx unless the scenario is direct.
func (st *stack) startStorage(ctx context.Context, cfg config, backups int, delay time.Duration) error {
	var err error
	var tok [16]byte
	rand.Read(tok[:])
	env := []string{"PBFS_TOKEN=" + hex.EncodeToString(tok[:])}
	if st.nginx, err = benchproc.FreeAddr(); err != nil {
		return err
	}
	st.target = "http://" + st.nginx
	if backups < 0 {
		return nil
	}
	proxy, err := benchproc.FreeAddr()
	if err != nil {
		return err
	}
	if st.admin, err = benchproc.FreeAddr(); err != nil {
		return err
	}
	args := []string{"--admin", st.admin, "--plugin", "http-proxy=" + cfg.proxy,
		"--plugin-config", fmt.Sprintf("http-proxy:listen=%s,upstream=http://%s", proxy, st.nginx)}
	_, v := storageOf(st.name)
	if v.direct {
		args = args[:2]
	}
	if v.deferred {
		args = append(args, "--fsync", "deferred")
	}
	ccfg := cluster.Config{Bin: cfg.bin, Dir: st.dir, Vol: st.vol, Backups: backups, Delay: delay, Env: env, Args: args}
	if v.ack1Memory {
		ccfg.Ack, ccfg.AckLevel = "1", "memory"
	}
	c, err := cluster.Start(ctx, ccfg)
	st.cl = c
	if err != nil {
		return err
	}
	st.mount, st.bk = c.Mount, c.Backups
	if !v.direct {
		st.target = "http://" + proxy
	}
	return nil
}

// startSite starts the site with its database on the volume and waits for
// the mount's proxy when clients go through it.
func (st *stack) startSite(ctx context.Context, cfg config, replicas int) error {
	var err error
	st.s, err = startSiteAt(ctx, "pbfs-bench-"+st.name, filepath.Join(st.dir, "run"), filepath.Join(st.vol, "mysql"), st.nginx, cfg.fpm, replicas)
	if err != nil {
		return err
	}
	if st.mount != nil && st.target != "http://"+st.nginx {
		return benchproc.WaitListening(ctx, st.mount, strings.TrimPrefix(st.target, "http://"))
	}
	return nil
}

// measure runs do at offered requests per second (0: the closed loop)
// and returns its point: the editPosts' outcomes and latencies, and the
// CPU, journal and replication bytes it cost.
func (st *stack) measure(offered float64, do func() []sample) *point {
	s, mount, bk, admin := st.s, st.mount, st.bk, st.admin
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

// verify checks that semi-sync's replicas hold what the primary does,
// stops the site, and checks that every backup holds exactly the
// primary's volume; it returns what was verified.
func (st *stack) verify(ctx context.Context, replicas, backups int) (string, error) {
	verified := "no backups"
	if replicas > 0 {
		if err := st.s.dbs.converged(ctx); err != nil {
			return "", err
		}
		verified = "replicas' tables identical to the primary's (CHECKSUM TABLE)"
	}
	// The database stops cleanly first; then every backup must hold
	// exactly the primary's volume.
	for _, err := range st.s.stop() {
		return "", err
	}
	st.s = nil
	if backups > 0 {
		return st.cl.Verify()
	}
	return verified, nil
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
