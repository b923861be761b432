package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// TestBackupJournalLostBatches: a backup whose journal lost its last
// batches (cut off while it was stopped) ends before what its volume
// applied; it must wait for a resync rather than take those batches
// again, and end equal to the primary.
func TestBackupJournalLostBatches(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	for i := 0; i < 20; i++ {
		must(t, os.WriteFile(filepath.Join(c.Vol, fmt.Sprintf("f%02d", i)), []byte(strings.Repeat("x", i*100)), 0o644))
		if i%5 == 4 {
			must(t, os.Rename(filepath.Join(c.Vol, fmt.Sprintf("f%02d", i)), filepath.Join(c.Vol, fmt.Sprintf("g%02d", i))))
		}
		if out, code := run(t, "barrier", "--journal", c.Jdir); code != 0 {
			t.Fatalf("barrier: %s", out)
		}
	}
	c.RequireConverged()
	b := c.Backups[0]
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
	segs, _ := filepath.Glob(filepath.Join(b.Jdir, "batches", "*.seg"))
	if len(segs) == 0 {
		t.Fatal("no segment files in the backup's journal")
	}
	// Cut the newest segment's records in half (past them it is
	// preallocated zeros): the journal then ends well before what the
	// volume applied, and the primary still holds every batch after it.
	newest := segs[len(segs)-1]
	data, err := os.ReadFile(newest)
	must(t, err)
	end := len(data)
	for end > 0 && data[end-1] == 0 {
		end--
	}
	must(t, os.Truncate(newest, int64(end/2)))
	c.StartBackup(b)
	must(t, os.WriteFile(filepath.Join(c.Vol, "after"), []byte("after"), 0o644))
	c.RequireConverged()
	if !strings.Contains(b.Out.String(), "it lost batches") {
		t.Fatalf("the backup did not say its journal lost batches:\n%s", b.Out)
	}
}

// TestPrimaryJournalLostBatches: a primary whose journal lost its last
// batches while it was stopped (after a clean stop) numbers new batches
// under seqs its backup already holds with other contents; it must resync
// the backup from the volume, and both end equal.
func TestPrimaryJournalLostBatches(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	for i := 0; i < 10; i++ {
		must(t, os.WriteFile(filepath.Join(c.Vol, fmt.Sprintf("f%02d", i)), []byte(strings.Repeat("y", 100+i)), 0o644))
		if out, code := run(t, "barrier", "--journal", c.Jdir); code != 0 {
			t.Fatalf("barrier: %s", out)
		}
	}
	c.RequireConverged()
	c.Primary.Stop()
	segs, _ := filepath.Glob(filepath.Join(c.Jdir, "batches", "*.seg"))
	if len(segs) == 0 {
		t.Fatal("no segment files in the primary's journal")
	}
	must(t, os.Remove(segs[len(segs)-1]))
	if out, code := run(t, "journal", "verify", "--journal", c.Jdir); code != 1 || !strings.Contains(out, "are lost") {
		t.Fatalf("journal verify on a journal that lost batches: exit %d, want 1:\n%s", code, out)
	}
	c.Primary = fstest.StartMount(t, nil, c.Vol, c.Jdir, "--backup", c.Backups[0].Addr, "--ack", "all")
	for i := 0; i < 3; i++ {
		must(t, os.WriteFile(filepath.Join(c.Vol, fmt.Sprintf("g%02d", i)), []byte("after"), 0o644))
		if out, code := run(t, "barrier", "--journal", c.Jdir, "--timeout", "30s"); code != 0 {
			t.Fatalf("barrier after the restart: %s", out)
		}
	}
	c.RequireConverged()
	if !strings.Contains(c.Primary.Out.String(), "lost batches since its last clean close") {
		t.Fatalf("the primary did not say its journal lost batches:\n%s", c.Primary.Out)
	}
}
