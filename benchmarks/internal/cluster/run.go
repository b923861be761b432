package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/control"
)

// WaitApplied waits until every backup has applied seq, so that one
// measurement's apply work does not spill into the next and the backups
// can be compared with the primary.
func (c *Cluster) WaitApplied(ctx context.Context, seq uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := c.Client.Status(ctx)
		if err != nil {
			return fmt.Errorf("%sstatus: %w", c.Name, err)
		}
		done := 0
		for _, b := range st.Backups {
			if b.AppliedSeq >= seq {
				done++
			}
		}
		if done == len(c.Backups) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%sbackups did not apply seq %d: %+v", c.Name, seq, st.Backups)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BackupClients are the backups' control sockets (for their metrics),
// dialed once.
func (c *Cluster) BackupClients() ([]*control.Client, error) {
	for i := len(c.bclients); i < len(c.BackupJdirs); i++ {
		cl, err := control.Dial(c.BackupJdirs[i])
		if err != nil {
			return nil, fmt.Errorf("%sbackup%d control socket: %w", c.Name, i, err)
		}
		c.bclients = append(c.bclients, cl)
	}
	return c.bclients, nil
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

// CPU is the CPU the primary (its process group: flush helper and
// plugins) and all backups have used so far.
func (c *Cluster) CPU() (primary, backups benchproc.CPU) {
	if c.Mount != nil {
		primary = c.Mount.CPU()
	}
	return primary, c.BackupCPU()
}

// BackupCPU is the CPU all backups used so far.
func (c *Cluster) BackupCPU() benchproc.CPU {
	var t benchproc.CPU
	for _, b := range c.Backups {
		t = t.Plus(b.CPU())
	}
	return t
}

// ProxyBytes is what the delay proxies forwarded to the backups (up) and
// back (down).
func (c *Cluster) ProxyBytes() (up, down int64) {
	for _, p := range c.proxies {
		u, d := p.Bytes()
		up += u
		down += d
	}
	return up, down
}

// Complaints lists the log lines above INFO of the primary and backups.
func (c *Cluster) Complaints() []string {
	var out []string
	for _, p := range c.Procs {
		out = append(out, p.Complaints()...)
	}
	return out
}

// MountStopped reports whether StopMount (or Stop) ran.
func (c *Cluster) MountStopped() bool { return c.mountDone }

// StopMount stops the primary (SIGINT seals the last batch and
// unmounts); a volume still mounted then is detached, and that is an
// error.
func (c *Cluster) StopMount() error {
	if c.Mount == nil || c.mountDone {
		return nil
	}
	c.mountDone = true
	if c.Client != nil {
		c.Client.Close()
	}
	err := c.Mount.Stop(60 * time.Second)
	if benchproc.Mounted(c.Vol) {
		syscall.Unmount(c.Vol, syscall.MNT_DETACH)
		err = errors.Join(err, fmt.Errorf("%s still mounted after the primary stopped; detached", c.Vol))
	}
	return err
}

// Stop stops the primary, then the backups, and closes the delay proxies.
// It always tries everything and returns every error.
func (c *Cluster) Stop() error {
	if c == nil || c.stopped {
		return nil
	}
	c.stopped = true
	errs := []error{c.StopMount()}
	for _, cl := range c.bclients {
		cl.Close()
	}
	for _, b := range c.Backups {
		errs = append(errs, b.Stop(30*time.Second))
	}
	for _, px := range c.proxies {
		px.Close()
	}
	return errors.Join(errs...)
}
