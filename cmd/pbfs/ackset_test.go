package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/fstest"
)

// The ack set with backups that die or lag: barriers wait, or, with
// --degrade-after, drop all but the last one.

// TestDeadBackupBlocksBarriers: with --ack all and no degrade policy, a
// dead backup holds every barrier (the client sees a timeout, never an
// early return), and the barrier completes once the backup is back.
func TestDeadBackupBlocksBarriers(t *testing.T) {
	c := fstest.NewCluster(t, 2, nil)
	b := c.Backups[0]
	b.Cmd.Process.Kill()
	b.Cmd.Wait()
	os.WriteFile(filepath.Join(c.Vol, "held"), []byte("must not be acknowledged yet"), 0o644)
	cl, _ := control.Dial(c.Jdir)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if seq, err := cl.Barrier(ctx); err == nil {
		t.Fatalf("barrier returned seq %d with a backup of the ack set dead", seq)
	}
	c.StartBackup(b)
	c.RequireConverged()
}

// TestDeadBackupDegrades: with --degrade-after, a dead backup leaves the
// ack set after the timeout (barriers complete again), is reported stale
// and logged, and rejoins once it has caught up.
func TestDeadBackupDegrades(t *testing.T) {
	c := fstest.NewCluster(t, 2, nil, "--degrade-after", "500ms")
	b := c.Backups[0]
	b.Cmd.Process.Kill()
	b.Cmd.Wait()
	os.WriteFile(filepath.Join(c.Vol, "f"), []byte("written while degraded"), 0o644)
	start := time.Now()
	c.Barrier()
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("barrier returned after %v, before the degrade timeout", d)
	}
	cl, _ := control.Dial(c.Jdir)
	st, _ := cl.Status(context.Background())
	if !st.Backups[0].Degraded || !st.Backups[0].Stale {
		t.Fatalf("dead backup not reported degraded and stale: %+v", st.Backups)
	}
	if !strings.Contains(c.Primary.Out.String(), "dropped from the ack set") {
		t.Fatalf("no log line for the degraded backup:\n%s", c.Primary.Out)
	}
	c.StartBackup(b)
	c.RequireConverged()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ = cl.Status(context.Background())
		if !st.Backups[0].Degraded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backup still degraded after catching up: %+v", st.Backups)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDegradeNeverEmptiesTheAckSet: with every backup dead, --degrade-after
// drops all but one from the ack set, and barriers wait for that one. It
// dropped them all before: barriers were acknowledged on the primary's
// disk alone, and a promoted backup silently lacked them (a failover sweep
// lost 1,310 acknowledged fsyncs so).
func TestDegradeNeverEmptiesTheAckSet(t *testing.T) {
	c := fstest.NewCluster(t, 2, nil, "--degrade-after", "300ms")
	for _, b := range c.Backups {
		b.Cmd.Process.Kill()
		b.Cmd.Wait()
	}
	os.WriteFile(filepath.Join(c.Vol, "held"), []byte("must not be acknowledged on the primary alone"), 0o644)
	cl, _ := control.Dial(c.Jdir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if seq, err := cl.Barrier(ctx); err == nil {
		t.Fatalf("barrier returned seq %d with every backup dead", seq)
	}
	st, _ := cl.Status(context.Background())
	if n := btoi(st.Backups[0].Degraded) + btoi(st.Backups[1].Degraded); n != 1 {
		t.Fatalf("%d backups degraded, want 1: %+v", n, st.Backups)
	}
	if !strings.Contains(c.Primary.Out.String(), "last one in the ack set") {
		t.Fatalf("no log line for the backup kept in the ack set:\n%s", c.Primary.Out)
	}
	for _, b := range c.Backups {
		c.StartBackup(b)
	}
	c.RequireConverged()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
