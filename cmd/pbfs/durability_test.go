package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// TestBarrierFlushesWhenNoBackupHoldsIt: a primary appends sealed batches
// to its journal without flushing them; a barrier flushes the journal
// itself exactly when no backup holds the batch (no backups, --ack none),
// so a barrier always means durable somewhere, and never when backups
// acked it.
func TestBarrierFlushesWhenNoBackupHoldsIt(t *testing.T) {
	syncs := func(p *fstest.Proc) float64 { return p.Counter("pbfs_journal_syncs_total", "") }
	write := func(path, data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	vol := t.TempDir()
	p := fstest.StartMount(t, nil, vol, filepath.Join(t.TempDir(), "j"))
	write(filepath.Join(vol, "a"), "sealed by the timer")
	time.Sleep(300 * time.Millisecond)
	if n := syncs(p); n != 0 {
		t.Fatalf("%v journal flushes before any barrier; timer seals should append lazily", n)
	}
	p.Barrier()
	if n := syncs(p); n != 1 {
		t.Fatalf("%v journal flushes after a barrier with no backups, want 1", n)
	}
	p.Barrier()
	if n := syncs(p); n != 1 {
		t.Fatalf("%v journal flushes after an empty barrier, want still 1", n)
	}
	write(filepath.Join(vol, "b"), "sealed by the barrier")
	p.Barrier()
	if n := syncs(p); n != 2 {
		t.Fatalf("%v journal flushes after a second barrier with news, want 2", n)
	}

	c := fstest.NewCluster(t, 1, nil)
	write(filepath.Join(c.Vol, "c"), "held by the backup")
	c.Barrier()
	if n := syncs(c.Primary); n != 0 {
		t.Fatalf("%v journal flushes on a primary whose backup acked, want 0", n)
	}

	// Only the barrier seals (no timer seal ships the batch before it).
	none := fstest.NewCluster(t, 1, nil, "--ack", "none", "--seal-interval", "1h")
	write(filepath.Join(none.Vol, "d"), "nobody waits")
	none.Barrier()
	if n := syncs(none.Primary); n < 1 {
		t.Fatalf("%v journal flushes on a primary with --ack none, want 1", n)
	}
}
