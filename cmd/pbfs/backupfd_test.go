package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/wire"
)

// TestBackupOutOfDescriptors: the backup's descriptors run out under it
// (its limit lowered with prlimit below what it holds, while it runs), so
// it cannot accept the connections that come. It does not crash: its
// primary's stream carries on, the failed accepts are logged and
// counted, its volume does not stall, and once its limit is back it takes
// new connections and has applied everything. (Peers alone cannot run a
// backup out: TestIdlePeersLeaveTheJournalItsDescriptors.)
func TestBackupOutOfDescriptors(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	b := c.Backups[0]
	must(t, os.WriteFile(filepath.Join(c.Vol, "before"), []byte("one"), 0o644))
	c.Barrier()

	pid := b.Cmd.Process.Pid
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The soft limit only: raising it back needs no privilege.
	prlimit := func(n string) {
		t.Helper()
		if out, err := exec.Command("prlimit", "--pid", fmt.Sprint(pid), "--nofile="+n+":").CombinedOutput(); err != nil {
			t.Fatalf("prlimit: %v: %s", err, out)
		}
	}
	was := softNofile(t, pid)
	prlimit(fmt.Sprint(len(fds) - 4))
	var junk []net.Conn
	defer func() {
		for _, j := range junk {
			j.Close()
		}
	}()
	for i := 0; i < 32; i++ {
		j, err := net.Dial("tcp", b.Addr) // waits in the port's backlog
		if err != nil {
			t.Fatal(err)
		}
		junk = append(junk, j)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(b.Out.String(), "too many open files"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line about the exhausted descriptors:\n%s", b.Out)
		}
	}
	if b.Cmd.ProcessState != nil {
		t.Fatalf("the backup exited:\n%s", b.Out)
	}
	// The stream that was up before carries on, and the backup applies
	// what it carries: each pause lets an apply window end in a sync,
	// which opens the volume.
	var seq uint64
	for i := 0; i < 5; i++ {
		must(t, os.WriteFile(filepath.Join(c.Vol, fmt.Sprintf("during%d", i)), []byte("two"), 0o644))
		seq = c.Barrier()
		time.Sleep(50 * time.Millisecond)
	}

	prlimit(was)
	for _, j := range junk {
		j.Close()
	}
	junk = nil
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var peer backup.Peer
	for {
		if peer, err = backup.Query(ctx, b.Addr, fstest.TestToken, wire.TLSFiles{}); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || peer.DurableSeq < seq {
		t.Fatalf("a new connection after the descriptors came back: %+v, %v", peer, err)
	}
	must(t, os.WriteFile(filepath.Join(c.Vol, "after"), []byte("three"), 0o644))
	c.WaitApplied(c.Barrier())
	c.RequireConverged()
	// A sync that found no descriptor left is retried, not taken for a
	// volume that needs a resync.
	if strings.Contains(b.Out.String(), "needs a resync") {
		t.Errorf("the backup stalled for want of descriptors:\n%s", b.Out)
	}
	if fstest.MetricSum(controlMetrics(t, b.Jdir), "pbfs_backup_accept_failures_total", "") < 1 {
		t.Error("no failed accept counted")
	}
}

// softNofile is pid's soft limit on open files, as prlimit takes it.
func softNofile(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			return strings.Fields(rest)[0]
		}
	}
	t.Fatal("no open files limit")
	return ""
}
