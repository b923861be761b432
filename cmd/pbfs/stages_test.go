package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pbfs/pbfs/internal/fstest"
)

// TestBarrierStagesAreTimed checks the histograms docs/PERFORMANCE.md
// splits a barrier with: each stage is timed once per barrier (or per
// batch, or per group a backup stored), and the stages of a barrier lie
// inside the mount's own time for it.
func TestBarrierStagesAreTimed(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil, "--seal-interval", "1h")
	sum := func(name string) float64 { return c.Primary.Counter(name, "") }

	// No file open read-write: no flush round.
	if err := os.WriteFile(filepath.Join(c.Vol, "w"), []byte("write-only"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Barrier()
	if n := sum("pbfs_fs_flush_seconds_count"); n != 0 {
		t.Fatalf("%v flush rounds timed with no file open read-write, want 0", n)
	}

	f, err := os.OpenFile(filepath.Join(c.Vol, "rw"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const n = 5
	for i := 0; i < n; i++ {
		if _, err := f.WriteAt([]byte("a barrier's worth"), int64(i)*4096); err != nil {
			t.Fatal(err)
		}
		c.Barrier()
	}
	if got := sum("pbfs_barrier_seconds_count"); got != n+1 {
		t.Errorf("pbfs_barrier_seconds counted %v barriers, want %d", got, n+1)
	}
	if got := sum("pbfs_fs_flush_seconds_count"); got != n {
		t.Errorf("pbfs_fs_flush_seconds counted %v flush rounds, want %d (a file is open read-write)", got, n)
	}
	if got := sum("pbfs_replicate_barrier_seconds_count"); got != n+1 {
		t.Errorf("pbfs_replicate_barrier_seconds counted %v ack waits, want %d", got, n+1)
	}
	if got := sum("pbfs_journal_sync_seconds_count"); got != 0 {
		t.Errorf("pbfs_journal_sync_seconds counted %v local syncs on a primary whose backup acked, want 0", got)
	}
	inside := sum("pbfs_barrier_seconds_sum")
	parts := sum("pbfs_fs_flush_seconds_sum") + sum("pbfs_journal_commit_seconds_sum") + sum("pbfs_replicate_barrier_seconds_sum")
	if parts <= 0 || parts > inside {
		t.Errorf("the stages add up to %.6f s, the barriers took %.6f s: a stage is timed outside its barrier", parts, inside)
	}

	text := controlMetrics(t, c.Backups[0].Jdir)
	groups := fstest.MetricSum(text, "pbfs_backup_store_seconds_count", "")
	if groups < 1 || groups > n+1 {
		t.Errorf("the backup timed %v stores for %d batches, want 1 to %d", groups, n+1, n+1)
	}
	if s := fstest.MetricSum(text, "pbfs_backup_store_seconds_sum", ""); s <= 0 || s > sum("pbfs_replicate_barrier_seconds_sum") {
		t.Errorf("the backup's stores took %.6f s, more than the primary waited for acks (%.6f s)", s, sum("pbfs_replicate_barrier_seconds_sum"))
	}
}
