package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/delayproxy"
	"github.com/pbfs/pbfs/control"
)

// The process helpers live in benchmarks/internal/benchproc.
type proc = benchproc.Proc

var (
	startProc     = benchproc.Start
	freeAddr      = benchproc.FreeAddr
	waitListening = benchproc.WaitListening
	mounted       = benchproc.Mounted
)

// cluster is a primary mount with its backups, and a delay proxy in front
// of each backup when the link has a delay.
type cluster struct {
	name    string
	dir     string
	vol     string
	jdir    string
	delay   time.Duration
	primary *proc
	backups []*proc
	bvols   []string
	proxies []*delayproxy.Proxy
	client  *control.Client   // the primary's control socket
	bctl    []*control.Client // each backup's, for its metrics
	file    *os.File          // the file the benchmark writes, on the mount
	stopped bool
}

// startCluster starts n backups (each on an empty volume, which is a copy
// of the primary's empty volume), a delay proxy in front of each when
// delay > 0, and the primary with --ack all. The caller stops it, also
// when startCluster fails.
func startCluster(ctx context.Context, cfg config, bin, runDir, token string, n int, delay time.Duration) (*cluster, error) {
	c := &cluster{name: fmt.Sprintf("b%d-d%dus", n, delay.Microseconds()), delay: delay}
	c.dir = filepath.Join(runDir, c.name)
	c.vol, c.jdir = filepath.Join(c.dir, "vol"), filepath.Join(c.dir, "jp")
	if err := os.MkdirAll(c.vol, 0o755); err != nil {
		return c, err
	}
	env := []string{"PBFS_TOKEN=" + token}
	var targets []string
	for i := 0; i < n; i++ {
		addr, err := freeAddr()
		if err != nil {
			return c, err
		}
		bvol := filepath.Join(c.dir, fmt.Sprintf("b%d", i))
		if err := os.Mkdir(bvol, 0o755); err != nil {
			return c, err
		}
		c.bvols = append(c.bvols, bvol)
		argv := append([]string{bin, "backup", "--listen", addr, "--journal", filepath.Join(c.dir, fmt.Sprintf("jb%d", i))}, cfg.backupArgs...)
		p, err := startProc(fmt.Sprintf("%s/backup%d", c.name, i), filepath.Join(c.dir, fmt.Sprintf("backup%d.log", i)), env,
			append(argv, bvol)...)
		if err != nil {
			return c, err
		}
		c.backups = append(c.backups, p)
		if err := waitListening(ctx, p, addr); err != nil {
			return c, err
		}
		bc, err := control.Dial(filepath.Join(c.dir, fmt.Sprintf("jb%d", i)))
		if err != nil {
			return c, err
		}
		c.bctl = append(c.bctl, bc)
		target := addr
		if delay > 0 {
			px, err := delayproxy.New("127.0.0.1:0", addr, delay)
			if err != nil {
				return c, err
			}
			c.proxies = append(c.proxies, px)
			target = px.Addr()
		}
		targets = append(targets, target)
	}
	argv := []string{bin, "mount", "--journal", c.jdir}
	for _, t := range targets {
		argv = append(argv, "--backup", t)
	}
	argv = append(argv, "--ack", "all")
	if cfg.viaFsync {
		argv = append(argv, "--fsync", "replicated")
	}
	argv = append(append(argv, cfg.mountArgs...), c.vol)
	p, err := startProc(c.name+"/primary", filepath.Join(c.dir, "primary.log"), env, argv...)
	if err != nil {
		return c, err
	}
	c.primary = p
	if c.client, err = control.Dial(c.jdir); err != nil {
		return c, err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if p.Exited() {
			return c, fmt.Errorf("primary exited: %v\n%s", p.Err, p.LogTail(20))
		}
		if mounted(c.vol) {
			st, err := c.client.Status(ctx)
			up := 0
			for _, b := range st.Backups {
				if b.Up {
					up++
				}
			}
			if err == nil && up == n {
				break
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return c, fmt.Errorf("primary did not come up with %d backups connected:\n%s", n, p.LogTail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	mode := os.O_RDWR
	if cfg.wronly {
		mode = os.O_WRONLY
	}
	c.file, err = os.OpenFile(filepath.Join(c.vol, "data"), mode|os.O_CREATE, 0o644)
	if err != nil {
		return c, err
	}
	if _, err := c.barrier(ctx); err != nil {
		return c, err
	}
	return c, nil
}

func (c *cluster) barrier(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	seq, err := c.client.Barrier(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: %w\n%s", c.name, err, c.primary.LogTail(10))
	}
	return seq, nil
}

// fsync is a barrier asked for as a database asks for a replicated
// commit: fsync(2) of the data file, which the mount's --fsync replicated
// answers once the barrier it takes is acked.
func (c *cluster) fsync() error {
	if err := c.file.Sync(); err != nil {
		return fmt.Errorf("%s: fsync: %w\n%s", c.name, err, c.primary.LogTail(10))
	}
	return nil
}

// waitApplied waits until every backup has applied seq, so that one
// point's apply work does not spill into the next.
func (c *cluster) waitApplied(ctx context.Context, seq uint64) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := c.client.Status(ctx)
		if err != nil {
			return err
		}
		done := 0
		for _, b := range st.Backups {
			if b.AppliedSeq >= seq {
				done++
			}
		}
		if done == len(c.backups) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: backups did not apply seq %d: %+v", c.name, seq, st.Backups)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// verify compares each backup's copy of the data file with the primary's.
func (c *cluster) verify() error {
	want, err := os.ReadFile(filepath.Join(c.vol, "data"))
	if err != nil {
		return err
	}
	for i, bvol := range c.bvols {
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

// stop stops the primary (which unmounts), then the backups and proxies.
// It always tries everything and returns every error.
func (c *cluster) stop() error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	var errs []error
	if c.file != nil {
		c.file.Close()
		c.file = nil
	}
	if c.primary != nil {
		if err := c.primary.Stop(20 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if mounted(c.vol) {
		errs = append(errs, fmt.Errorf("%s still mounted after the primary stopped; detaching", c.vol))
		syscall.Unmount(c.vol, syscall.MNT_DETACH)
	}
	for _, b := range c.backups {
		if err := b.Stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	for _, px := range c.proxies {
		px.Close()
	}
	for _, cl := range c.clients() {
		if cl != nil {
			cl.Close()
		}
	}
	return errors.Join(errs...)
}

// cpu is the CPU the primary (with its flush helper) and all backups
// have used so far.
func (c *cluster) cpu() (primary, backups benchproc.CPU) {
	primary = c.primary.CPU()
	for _, b := range c.backups {
		backups = backups.Plus(b.CPU())
	}
	return primary, backups
}

func (c *cluster) procs() []*proc {
	var ps []*proc
	if c.primary != nil {
		ps = append(ps, c.primary)
	}
	return append(ps, c.backups...)
}

// clients are the control sockets of the primary, then of each backup.
func (c *cluster) clients() []*control.Client { return append([]*control.Client{c.client}, c.bctl...) }
