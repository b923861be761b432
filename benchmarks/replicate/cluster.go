package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/cluster"
	"github.com/pbfs/pbfs/control"
)

// pcluster is a primary mount with its backups (benchmarks/internal/cluster),
// a delay proxy in front of each backup when the link has a delay, and the
// file the benchmark writes.
type pcluster struct {
	*cluster.Cluster
	name  string
	delay time.Duration
	file  *os.File // the file the benchmark writes, on the mount
}

// startCluster starts n backups (each on an empty volume, which is a copy
// of the primary's empty volume), a delay proxy in front of each when
// delay > 0, and the primary with --ack all. The caller stops it, also
// when startCluster fails.
func startCluster(ctx context.Context, cfg config, bin, runDir, token string, n int, delay time.Duration) (*pcluster, error) {
	c := &pcluster{name: fmt.Sprintf("b%d-d%dus", n, delay.Microseconds()), delay: delay}
	dir := filepath.Join(runDir, c.name)
	args := append([]string{}, cfg.mountArgs...)
	if cfg.viaFsync {
		args = append([]string{"--fsync", "replicated"}, args...)
	}
	var err error
	c.Cluster, err = cluster.Start(ctx, cluster.Config{Bin: bin, Dir: dir, Vol: filepath.Join(dir, "vol"), Name: c.name + "/",
		Backups: n, Delay: delay, Env: []string{"PBFS_TOKEN=" + token}, Args: args, BackupArgs: cfg.backupArgs})
	if err != nil {
		return c, err
	}
	if _, err := c.BackupClients(); err != nil {
		return c, err
	}
	mode := os.O_RDWR
	if cfg.wronly {
		mode = os.O_WRONLY
	}
	c.file, err = os.OpenFile(filepath.Join(c.Vol, "data"), mode|os.O_CREATE, 0o644)
	if err != nil {
		return c, err
	}
	if _, err := c.barrier(ctx); err != nil {
		return c, err
	}
	return c, nil
}

func (c *pcluster) barrier(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	seq, err := c.Client.Barrier(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: %w\n%s", c.name, err, c.Mount.LogTail(10))
	}
	return seq, nil
}

// fsync is a barrier asked for as a database asks for a replicated
// commit: fsync(2) of the data file, which the mount's --fsync replicated
// answers once the barrier it takes is acked.
func (c *pcluster) fsync() error {
	if err := c.file.Sync(); err != nil {
		return fmt.Errorf("%s: fsync: %w\n%s", c.name, err, c.Mount.LogTail(10))
	}
	return nil
}

// waitApplied waits until every backup has applied seq, so that one
// point's apply work does not spill into the next.
func (c *pcluster) waitApplied(ctx context.Context, seq uint64) error {
	return c.WaitApplied(ctx, seq, 60*time.Second)
}

// verify compares each backup's copy of the data file with the primary's.
func (c *pcluster) verify() error {
	want, err := os.ReadFile(filepath.Join(c.Vol, "data"))
	if err != nil {
		return err
	}
	for i, bvol := range c.BackupVols {
		got, err := os.ReadFile(filepath.Join(bvol, "data"))
		if err != nil {
			return fmt.Errorf("%s backup %d: %w", c.name, i, err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s backup %d: data file differs from the primary's (%d bytes against %d)", c.name, i, len(got), len(want))
		}
	}
	return nil
}

// stop closes the data file and stops the cluster.
func (c *pcluster) stop() error {
	if c.file != nil {
		c.file.Close()
		c.file = nil
	}
	if c.Cluster == nil {
		return nil
	}
	return c.Stop()
}

// clients are the control sockets of the primary, then of each backup.
func (c *pcluster) clients() []*control.Client {
	bc, _ := c.BackupClients()
	return append([]*control.Client{c.Client}, bc...)
}
