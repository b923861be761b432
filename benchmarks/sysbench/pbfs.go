package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/delayproxy"
	report_ "github.com/pbfs/pbfs/benchmarks/internal/report"
	"github.com/pbfs/pbfs/benchmarks/internal/treecmp"
	"github.com/pbfs/pbfs/control"
)

// cluster is a pbfs mount over a volume, with its backups.
type cluster struct {
	name    string
	dir     string
	vol     string
	jdir    string
	mount   *benchproc.Proc
	backups []*benchproc.Proc
	bvols   []string
	client  *control.Client
	proxies []*delayproxy.Proxy // between the mount and its backups, with a delay
	stopped bool                // the mount was stopped
}

// startCluster starts sp's backups and a mount with its --ack and
// --ack-level over an empty volume; with sp.plugin, the mount runs
// mysql-hint with fsync=replicated, reading the server's options from cnf.
// A delay above 0 is added each way on every backup's link (delayproxy).
func (b *bench) startCluster(name string, sp spec, cnf string) (*cluster, error) {
	n, plugin, delay := sp.backups, sp.plugin, sp.delay
	ctx := b.ctx
	c := &cluster{name: name, dir: filepath.Join(b.runDir, name)}
	b.clusters = append(b.clusters, c)
	c.vol, c.jdir = filepath.Join(c.dir, "vol"), filepath.Join(c.dir, "j")
	if err := os.MkdirAll(c.vol, 0o755); err != nil {
		return c, fmt.Errorf("start %s: %w", name, err)
	}
	env := []string{"PBFS_TOKEN=" + b.token}
	argv := []string{b.bin, "mount", "--journal", c.jdir}
	for i := 0; i < n; i++ {
		addr, err := benchproc.FreeAddr()
		if err != nil {
			return c, fmt.Errorf("start %s: %w", name, err)
		}
		bvol := filepath.Join(c.dir, fmt.Sprintf("backup%d-vol", i))
		if err := os.Mkdir(bvol, 0o755); err != nil {
			return c, fmt.Errorf("start %s: %w", name, err)
		}
		c.bvols = append(c.bvols, bvol)
		p, err := benchproc.Start(fmt.Sprintf("%s/backup%d", name, i), filepath.Join(c.dir, fmt.Sprintf("backup%d.log", i)), env,
			b.bin, "backup", "--listen", addr, "--journal", filepath.Join(c.dir, fmt.Sprintf("jb%d", i)), bvol)
		if err != nil {
			return c, err
		}
		c.backups = append(c.backups, p)
		if err := benchproc.WaitListening(ctx, p, addr); err != nil {
			return c, err
		}
		if delay > 0 {
			px, err := delayproxy.New("127.0.0.1:0", addr, delay)
			if err != nil {
				return c, fmt.Errorf("start %s: %w", name, err)
			}
			c.proxies = append(c.proxies, px)
			addr = px.Addr()
		}
		argv = append(argv, "--backup", addr)
	}
	if n > 0 {
		argv = append(argv, "--ack", sp.ack)
		if sp.ackLevel != "" {
			argv = append(argv, "--ack-level", sp.ackLevel)
		}
	}
	if plugin {
		argv = append(argv, "--plugin", "mysql="+b.hint, "--plugin-config", "mysql:fsync=replicated,defaults-file="+cnf)
	}
	argv = append(append(argv, b.cfg.mountArgs...), c.vol)
	p, err := benchproc.Start(name+"/mount", filepath.Join(c.dir, "mount.log"), env, argv...)
	if err != nil {
		return c, err
	}
	c.mount = p
	if c.client, err = control.Dial(c.jdir); err != nil {
		return c, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if p.Exited() {
			return c, fmt.Errorf("%s: mount exited: %v\n%s", name, p.Err, p.LogTail(20))
		}
		if benchproc.Mounted(c.vol) {
			st, err := c.client.Status(ctx)
			up := 0
			for _, bs := range st.Backups {
				if bs.Up {
					up++
				}
			}
			if err == nil && up == n && (!plugin || len(st.Plugins) == 1 && st.Plugins[0].State == "running") {
				return c, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return c, fmt.Errorf("%s: mount not up with %d backups within 30 s:\n%s", name, n, p.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metrics reads the mount's metrics as name{labels} -> value.
func (c *cluster) metrics(ctx context.Context) (map[string]float64, error) {
	text, err := c.client.Metrics(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	return report_.ParseMetrics(text), nil
}

// sum adds the values of every series of the metric name (any labels).
func sum(m map[string]float64, name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// checkAcked takes a barrier and checks that every backup acks the mount's
// last seq (at once with --ack all, within 30 s with a smaller ack set).
// It returns that seq.
func (c *cluster) checkAcked(ctx context.Context) (uint64, error) {
	bctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := c.client.Barrier(bctx); err != nil {
		return 0, fmt.Errorf("%s: %w", c.name, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.client.Status(ctx)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", c.name, err)
		}
		if len(st.Backups) != len(c.backups) {
			return st.LastSeq, fmt.Errorf("%s: status lists %d backups, want %d", c.name, len(st.Backups), len(c.backups))
		}
		var behind []string
		for _, bs := range st.Backups {
			if bs.AckedSeq < st.LastSeq || !bs.Up || bs.Stale {
				behind = append(behind, fmt.Sprintf("backup %s acked %d of last seq %d (up %v, stale %v)", bs.Addr, bs.AckedSeq, st.LastSeq, bs.Up, bs.Stale))
			}
		}
		if len(behind) == 0 {
			return st.LastSeq, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return st.LastSeq, fmt.Errorf("%s: %s", c.name, strings.Join(behind, "; "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitApplied waits until every backup has applied the last seq.
func (c *cluster) waitApplied(ctx context.Context) (uint64, error) {
	last, err := c.checkAcked(ctx)
	if err != nil {
		return last, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		st, err := c.client.Status(ctx)
		if err != nil {
			return last, fmt.Errorf("%s: %w", c.name, err)
		}
		done := 0
		for _, bs := range st.Backups {
			if bs.AppliedSeq >= last {
				done++
			}
		}
		if done == len(c.backups) {
			return last, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return last, fmt.Errorf("%s: backups did not apply seq %d: %+v", c.name, last, st.Backups)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// localOnly are the files of a data directory mysql-hint keeps on the
// primary: a backup need not hold them.
var localOnly = []string{"ibtmp1", "ib_buffer_pool", "ib_buffer_pool.incomplete", "*.pid", "*.sock", "*.err"}

// compareBackups compares every replicated file of the primary's volume
// (after the mount stopped) with each backup's copy: the same set of
// files, each with the same size and contents (treecmp). It returns the
// files and bytes compared.
func (c *cluster) compareBackups() (files int, bytes int64, err error) {
	var errs []error
	for i, bvol := range c.bvols {
		cmp, err := treecmp.CompareWith(c.vol, bvol, treecmp.Options{Skip: localOnly, ContentOnly: true})
		if err != nil {
			return files, bytes, err
		}
		files, bytes = cmp.Paths, cmp.Bytes
		if diff := cmp.Diffs; len(diff) > 0 {
			if len(diff) > 10 {
				diff = append(diff[:10], fmt.Sprintf("and %d more", len(diff)-10))
			}
			errs = append(errs, fmt.Errorf("%s backup%d: %s", c.name, i, strings.Join(diff, "; ")))
		}
	}
	return files, bytes, errors.Join(errs...)
}

// stopMount stops the mount (SIGINT seals the last batch and unmounts).
func (c *cluster) stopMount() error {
	if c.mount == nil || c.stopped {
		return nil
	}
	c.stopped = true
	if c.client != nil {
		c.client.Close()
	}
	err := c.mount.Stop(60 * time.Second)
	if benchproc.Mounted(c.vol) {
		syscall.Unmount(c.vol, syscall.MNT_DETACH)
		err = errors.Join(err, fmt.Errorf("%s still mounted after the mount stopped; detached", c.vol))
	}
	return err
}

// stop stops the mount, then the backups; it tries everything.
func (c *cluster) stop() error {
	errs := []error{c.stopMount()}
	for _, p := range c.backups {
		if p.Exited() && p.Err == nil {
			continue
		}
		errs = append(errs, p.Stop(30*time.Second))
	}
	for _, px := range c.proxies {
		px.Close()
	}
	return errors.Join(errs...)
}

// complaints lists the log lines above INFO of the mount and backups.
func (c *cluster) complaints() []string {
	var out []string
	for _, p := range append([]*benchproc.Proc{c.mount}, c.backups...) {
		if p != nil {
			out = append(out, p.Complaints()...)
		}
	}
	return out
}
