package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// A backup that stays down is logged once, with the remedy, not at every
// retry; a new reason (a wrong token) is logged once more, with its own
// remedy; the stream coming back says how long it was down.
func TestBackupOutageLoggedOnce(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil, "--ack", "none")
	c.RequireConverged() // past the first resync
	b := c.Backups[0]
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
	waitLogged(t, c.Primary.Out, "replication stream down; retrying", 1, "the outage was not logged")
	time.Sleep(4 * time.Second) // several retries
	out := c.Primary.Out.String()
	if n := strings.Count(out, "replication stream down"); n != 1 || !strings.Contains(out, "nothing listens at "+b.Addr) {
		t.Fatalf("a backup down 4 s: %d lines, want 1 naming the remedy:\n%s", n, out)
	}

	b.Args = append(b.Args, "--token", "not-the-token")
	c.StartBackup(b)
	waitLogged(t, c.Primary.Out, "now for another reason", 1, "the wrong token was not logged")
	time.Sleep(3 * time.Second)
	out = c.Primary.Out.String()
	if n := strings.Count(out, "now for another reason"); n != 1 || !strings.Contains(out, "refuses this primary's token") {
		t.Fatalf("a backup refusing the token: %d lines, want 1 naming the remedy:\n%s", n, out)
	}
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
	b.Args = b.Args[:len(b.Args)-2]
	c.StartBackup(b)
	waitLogged(t, c.Primary.Out, "failed_attempts=", 1, "the stream's return did not say how long it was down")
	c.RequireConverged()
}
