// Package cluster starts, watches and stops the pbfs clusters the benchmark
// programs measure: a `pbfs mount` primary and its `pbfs backup` processes.
package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/delayproxy"
)

// Config describes a pbfs primary and its backups as a benchmark
// runs them.
type Config struct {
	Bin      string        // the pbfs binary
	Dir      string        // journals, backup volumes and logs go here
	Vol      string        // the primary's volume (made if missing)
	Name     string        // prefix of the processes' names and logs
	Backups  int           // backups, each on an empty volume of its own
	Delay    time.Duration // one-way delay added on each backup's link (delayproxy)
	Env      []string      // every process's extra environment (PBFS_TOKEN=...)
	Ack      string        // --ack; empty: all
	AckLevel string        // --ack-level; empty: the mount's default (disk)
	Args     []string      // more `pbfs mount` flags: plugins, --admin, ...
	Wrap     []string      // a command the mount runs under (prlimit --nofile=N:N)
}

// Cluster is a running primary with its backups. Procs lists them in the
// order they started; stop them in reverse, then Close.
type Cluster struct {
	Mount   *benchproc.Proc
	Backups []*benchproc.Proc
	Jdir    string // the primary's journal
	Procs   []*benchproc.Proc
	proxies []*delayproxy.Proxy
	bin     string
	env     []string
}

// Start starts the backups (behind delay proxies when cfg.Delay is
// set) and the primary with --ack all (or cfg.Ack), and waits until the volume is
// mounted. On failure the caller still stops c.Procs and calls Close.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	c := &Cluster{Jdir: filepath.Join(cfg.Dir, "jp"), bin: cfg.Bin, env: cfg.Env}
	if err := os.MkdirAll(cfg.Vol, 0o755); err != nil {
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
	for i := 0; i < cfg.Backups; i++ {
		addr, err := benchproc.FreeAddr()
		if err != nil {
			return c, err
		}
		bvol := filepath.Join(cfg.Dir, fmt.Sprintf("b%d", i))
		if err := os.MkdirAll(bvol, 0o755); err != nil {
			return c, err
		}
		name := fmt.Sprintf("%sbackup%d", cfg.Name, i)
		b, err := benchproc.Start(name, filepath.Join(cfg.Dir, name+".log"), cfg.Env,
			cfg.Bin, "backup", "--listen", addr, "--journal", filepath.Join(cfg.Dir, fmt.Sprintf("jb%d", i)), bvol)
		if err != nil {
			return c, err
		}
		c.Backups, c.Procs = append(c.Backups, b), append(c.Procs, b)
		if err := benchproc.WaitListening(ctx, b, addr); err != nil {
			return c, err
		}
		if cfg.Delay > 0 {
			px, err := delayproxy.New("127.0.0.1:0", addr, cfg.Delay)
			if err != nil {
				return c, err
			}
			c.proxies = append(c.proxies, px)
			addr = px.Addr()
		}
		argv = append(argv, "--backup", addr)
	}
	argv = append(append(argv, cfg.Args...), cfg.Vol)
	m, err := benchproc.Start(cfg.Name+"primary", filepath.Join(cfg.Dir, cfg.Name+"primary.log"), cfg.Env, argv...)
	if err != nil {
		return c, err
	}
	c.Mount, c.Procs = m, append(c.Procs, m)
	for i := 0; !benchproc.Mounted(cfg.Vol); i++ {
		if m.Exited() || i > 500 || ctx.Err() != nil {
			return c, fmt.Errorf("the mount did not come up:\n%s", m.LogTail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c, nil
}

// BackupCPU is the CPU all backups used so far.
func (c *Cluster) BackupCPU() benchproc.CPU {
	var t benchproc.CPU
	for _, b := range c.Backups {
		t = t.Plus(b.CPU())
	}
	return t
}

// Verify runs `pbfs verify` against the running primary: every backup's
// volume must equal the primary's. It says what it found, for a report.
func (c *Cluster) Verify() (string, error) {
	if len(c.Backups) == 0 {
		return "no backups", nil
	}
	cmd := exec.Command(c.bin, "verify", "--journal", c.Jdir)
	cmd.Env = append(os.Environ(), c.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("pbfs verify: %v\n%s", err, out)
	}
	return fmt.Sprintf("%d backups identical to the primary (pbfs verify)", len(c.Backups)), nil
}

// Close closes the delay proxies (after the processes were stopped).
func (c *Cluster) Close() {
	for _, px := range c.proxies {
		px.Close()
	}
}
