package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	benchcluster "github.com/pbfs/pbfs/benchmarks/internal/cluster"
	report_ "github.com/pbfs/pbfs/benchmarks/internal/report"
	"github.com/pbfs/pbfs/benchmarks/internal/treecmp"
)

// cluster is a pbfs mount over a volume, with its backups
// (benchmarks/internal/cluster).
type cluster struct {
	*benchcluster.Cluster
	name  string
	dir   string
	vol   string
	bvols []string
}

// startCluster starts sp's backups and a mount with its --ack and
// --ack-level over an empty volume; with sp.plugin, the mount runs
// mysql-hint with fsync=replicated, reading the server's options from cnf.
// A delay above 0 is added each way on every backup's link (delayproxy).
func (b *bench) startCluster(name string, sp spec, cnf string) (*cluster, error) {
	c := &cluster{name: name, dir: filepath.Join(b.runDir, name)}
	c.vol = filepath.Join(c.dir, "vol")
	b.clusters = append(b.clusters, c)
	cfg := benchcluster.Config{Bin: b.bin, Dir: c.dir, Vol: c.vol, Name: name + "/", Backups: sp.backups, Delay: sp.delay,
		Env: []string{"PBFS_TOKEN=" + b.token}}
	if sp.backups > 0 {
		cfg.Ack, cfg.AckLevel = sp.ack, sp.ackLevel
	}
	if sp.plugin {
		cfg.Args = []string{"--plugin", "mysql=" + b.hint, "--plugin-config", "mysql:fsync=replicated,defaults-file=" + cnf}
		cfg.Plugins = 1
	}
	cfg.Args = append(cfg.Args, b.cfg.mountArgs...)
	var err error
	c.Cluster, err = benchcluster.Start(b.ctx, cfg)
	c.bvols = c.BackupVols
	return c, err
}

// metrics reads the mount's metrics as name{labels} -> value.
func (c *cluster) metrics(ctx context.Context) (map[string]float64, error) {
	text, err := c.Client.Metrics(ctx)
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
	if _, err := c.Client.Barrier(bctx); err != nil {
		return 0, fmt.Errorf("%s: %w", c.name, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Client.Status(ctx)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", c.name, err)
		}
		if len(st.Backups) != len(c.Backups) {
			return st.LastSeq, fmt.Errorf("%s: status lists %d backups, want %d", c.name, len(st.Backups), len(c.Backups))
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
	return last, c.WaitApplied(ctx, last, 5*time.Minute)
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

// stop stops the mount, then the backups; it tries everything.
func (c *cluster) stop() error {
	if c.Cluster == nil {
		return nil
	}
	return c.Stop()
}
