// Package cluster starts, watches and stops the pbfs clusters the benchmark
// programs measure: a `pbfs mount` primary and its `pbfs backup` processes.
package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/delayproxy"
	"github.com/pbfs/pbfs/control"
)

// Config describes a pbfs primary and its backups as a benchmark runs
// them.
type Config struct {
	Bin        string        // the pbfs binary
	Dir        string        // journals, backup volumes and logs go here
	Vol        string        // the primary's volume (made if missing)
	Name       string        // prefix of the processes' names ("pbfs-1-", "b1-d0us/")
	Backups    int           // backups, each on an empty volume of its own
	Delay      time.Duration // one-way delay added on each backup's link (delayproxy)
	Env        []string      // every process's extra environment (PBFS_TOKEN=...)
	Ack        string        // --ack; empty: all
	AckLevel   string        // --ack-level; empty: the mount's default (disk)
	Args       []string      // more `pbfs mount` flags: plugins, --admin, ...
	BackupArgs []string      // more `pbfs backup` flags
	Wrap       []string      // a command the mount runs under (prlimit --nofile=N:N)
	Plugins    int           // plugins the mount must report running before Start returns
}

// Cluster is a running primary with its backups. Stop stops it.
type Cluster struct {
	Name        string
	Mount       *benchproc.Proc
	Backups     []*benchproc.Proc
	Procs       []*benchproc.Proc // in the order they started
	Vol         string            // the primary's volume
	Jdir        string            // the primary's journal
	BackupVols  []string
	BackupJdirs []string
	Client      *control.Client // the primary's control socket, once it serves
	proxies     []*delayproxy.Proxy
	bclients    []*control.Client
	bin         string
	env         []string
	mountDone   bool
	stopped     bool
}

// readyWithin bounds the wait for a started cluster to serve.
const readyWithin = 30 * time.Second

// Start starts the backups (behind delay proxies when cfg.Delay is set)
// and the primary with --ack all (or cfg.Ack), and waits until the volume
// is mounted, every backup is connected and the plugins run. On failure
// the caller still calls Stop.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	c := &Cluster{Name: cfg.Name, Vol: cfg.Vol, Jdir: filepath.Join(cfg.Dir, "jp"), bin: cfg.Bin, env: cfg.Env}
	if err := os.MkdirAll(cfg.Vol, 0o755); err != nil {
		return c, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	targets, err := c.startBackups(ctx, cfg)
	if err != nil {
		return c, err
	}
	ack := cfg.Ack
	if ack == "" {
		ack = "all"
	}
	argv := append(append([]string{}, cfg.Wrap...), cfg.Bin, "mount", "--journal", c.Jdir, "--ack", ack)
	if cfg.AckLevel != "" {
		argv = append(argv, "--ack-level", cfg.AckLevel)
	}
	for _, t := range targets {
		argv = append(argv, "--backup", t)
	}
	argv = append(append(argv, cfg.Args...), cfg.Vol)
	m, err := benchproc.Start(cfg.Name+"primary", filepath.Join(cfg.Dir, "primary.log"), cfg.Env, argv...)
	if err != nil {
		return c, err
	}
	c.Mount, c.Procs = m, append(c.Procs, m)
	return c, c.waitReady(ctx, cfg.Backups, cfg.Plugins)
}

// startBackups starts cfg.Backups backups and returns the addresses the
// primary reaches them at (a delay proxy's, with a delay).
func (c *Cluster) startBackups(ctx context.Context, cfg Config) ([]string, error) {
	var targets []string
	for i := 0; i < cfg.Backups; i++ {
		addr, err := benchproc.FreeAddr()
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
		}
		bvol, jdir := filepath.Join(cfg.Dir, fmt.Sprintf("b%d", i)), filepath.Join(cfg.Dir, fmt.Sprintf("jb%d", i))
		if err := os.MkdirAll(bvol, 0o755); err != nil {
			return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
		}
		c.BackupVols, c.BackupJdirs = append(c.BackupVols, bvol), append(c.BackupJdirs, jdir)
		argv := append([]string{cfg.Bin, "backup", "--listen", addr, "--journal", jdir}, cfg.BackupArgs...)
		b, err := benchproc.Start(fmt.Sprintf("%sbackup%d", cfg.Name, i), filepath.Join(cfg.Dir, fmt.Sprintf("backup%d.log", i)), cfg.Env,
			append(argv, bvol)...)
		if err != nil {
			return nil, err
		}
		c.Backups, c.Procs = append(c.Backups, b), append(c.Procs, b)
		if err := benchproc.WaitListening(ctx, b, addr); err != nil {
			return nil, err
		}
		if cfg.Delay > 0 {
			px, err := delayproxy.New("127.0.0.1:0", addr, cfg.Delay)
			if err != nil {
				return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
			}
			c.proxies = append(c.proxies, px)
			addr = px.Addr()
		}
		targets = append(targets, addr)
	}
	return targets, nil
}

// waitReady waits until the volume is mounted, the control socket
// answers, n backups are connected and plugins plugins run.
func (c *Cluster) waitReady(ctx context.Context, n, plugins int) error {
	deadline := time.Now().Add(readyWithin)
	for {
		if c.Mount.Exited() {
			return fmt.Errorf("%sprimary exited: %v\n%s", c.Name, c.Mount.Err, c.Mount.LogTail(20))
		}
		if benchproc.Mounted(c.Vol) && c.ready(ctx, n, plugins) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%sprimary not up with %d backups within %s:\n%s", c.Name, n, readyWithin, c.Mount.LogTail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) ready(ctx context.Context, n, plugins int) bool {
	if c.Client == nil {
		cl, err := control.Dial(c.Jdir)
		if err != nil {
			return false
		}
		c.Client = cl
	}
	st, err := c.Client.Status(ctx)
	if err != nil {
		return false
	}
	up, running := 0, 0
	for _, b := range st.Backups {
		if b.Up {
			up++
		}
	}
	for _, p := range st.Plugins {
		if p.State == "running" {
			running++
		}
	}
	return up == n && running >= plugins
}
