package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// barrierTime writes a file and times a barrier over it.
func barrierTime(t *testing.T, c *fstest.Cluster, name string) time.Duration {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(c.Vol, name), []byte("ack level"), 0o644))
	start := time.Now()
	c.Barrier()
	return time.Since(start)
}

// --ack-level: with disk a barrier waits for the backup's journal to be
// durable; with memory only for the backup to have received and
// checksummed the batch. A backup whose disk takes 400 ms per append
// shows the difference; with memory the batch still ends durable there.
func TestAckLevels(t *testing.T) {
	slow := func(c *fstest.Cluster) {
		b := c.Backups[0]
		b.Cmd.Process.Signal(os.Interrupt)
		b.Cmd.Wait()
		b.Env = []string{"PBFS_FAILPOINT_APPEND_DELAY=400ms"}
		c.StartBackup(b)
	}
	disk := fstest.NewCluster(t, 1, nil, "--seal-interval", "1h")
	slow(disk)
	barrierTime(t, disk, "warm") // the reconnect
	if d := barrierTime(t, disk, "f"); d < 400*time.Millisecond {
		t.Errorf("--ack-level disk: a barrier took %v, under the backup's 400 ms append", d)
	}
	mem := fstest.NewCluster(t, 1, nil, "--seal-interval", "1h", "--ack-level", "memory")
	slow(mem)
	barrierTime(t, mem, "warm")
	if d := barrierTime(t, mem, "f"); d >= 350*time.Millisecond {
		t.Errorf("--ack-level memory: a barrier took %v, as if it waited for the backup's disk", d)
	}
	mem.RequireConverged() // and it is durable and applied there all the same
}
