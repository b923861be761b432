package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/journal"
)

// TestJournalDiskFills fills the real file system the journal is on.
// Badger dies of SIGBUS when a write into one of its mapped files finds
// the disk full; pbfs must keep it from getting there. First the service
// writes more than the journal's disk can hold: its writes fail with
// ENOSPC before the journal runs out, and everything it was told was
// written is journaled. Then something else takes the disk while a batch
// is open: the append is refused and the batch held, barriers fail naming
// the cause, the mount keeps serving reads and unlinks, it counts and
// logs all of it, and once space is back the held batch goes in on its
// own. The journal then verifies and replays to the volume.
func TestJournalDiskFills(t *testing.T) {
	vol, start, _ := layout(t)
	disk := fstest.SmallFS(t, 200<<20)
	_, size := fstest.FreeSpace(t, disk)
	reserve := journal.DefaultReserve(size)
	ballast := fstest.TakeSpace(t, disk, reserve+60<<20)
	jdir := filepath.Join(disk, "journal")
	// Batches seal on size, barriers and retries only: the test decides
	// when an append happens.
	d := startMount(t, nil, vol, jdir, "--seal-interval", "1h", "--batch-bytes", "16777216")

	chunk := make([]byte, 4<<20)
	var written []string
	write := func(i int) error {
		rand.Read(chunk) // incompressible, so the journal grows as fast as the volume
		p := filepath.Join(vol, fmt.Sprintf("f%03d", i))
		err := os.WriteFile(p, chunk, 0o644)
		if err == nil {
			written = append(written, p)
		}
		return err
	}
	var werr error
	for i := 0; werr == nil; i++ {
		if i == 60 {
			t.Fatalf("240 MiB into a 200 MiB journal disk and no write refused:\n%s", d.Out)
		}
		werr = write(i)
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("write with the journal disk full: %v, want ENOSPC", werr)
	}
	if len(written) < 10 {
		t.Fatalf("only %d files went in before the journal filled", len(written))
	}
	d.Barrier() // everything accepted fits
	if d.Counter("pbfs_capture_writes_refused_total", "") == 0 {
		t.Fatalf("refusals not counted:\n%s", d.Out)
	}
	if !strings.Contains(d.Out.String(), "refusing writes that take space") {
		t.Fatalf("refusals not logged:\n%s", d.Out)
	}

	// Room again, then taken by someone else while a batch is open.
	fstest.GiveSpace(t, ballast)
	waitWritable(t, d, filepath.Join(vol, "probe"))
	for i := 0; i < 2; i++ {
		if err := write(100 + i); err != nil {
			free, _ := fstest.FreeSpace(t, disk)
			t.Fatalf("write with room again (%d bytes free, %d reserved): %v\n%s", free, reserve, err, d.Out)
		}
	}
	ballast = fstest.TakeSpace(t, disk, reserve-8<<20)
	out, code := run(t, "barrier", "--journal", jdir)
	if code == 0 || !strings.Contains(out, "journal file system is full") {
		t.Fatalf("barrier with the journal disk full: exit %d, %s", code, out)
	}
	if err := write(200); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write while the journal refuses a batch: %v, want ENOSPC", err)
	}
	if d.Cmd.ProcessState != nil {
		t.Fatalf("the mount died:\n%s", d.Out)
	}
	if d.Counter("pbfs_journal_appends_refused_total", "") == 0 {
		t.Fatalf("refused appends not counted:\n%s", d.Out)
	}
	// Reads and unlinks go on: an operator can still free space.
	if b, err := os.ReadFile(written[0]); err != nil || len(b) != len(chunk) {
		t.Fatalf("read with the journal disk full: %d bytes, %v", len(b), err)
	}
	if err := os.Remove(written[1]); err != nil {
		t.Fatalf("unlink with the journal disk full: %v", err)
	}

	// Space comes back: the held batch goes in without a barrier.
	fstest.GiveSpace(t, ballast)
	waitWritable(t, d, filepath.Join(vol, "probe"))
	d.Barrier()
	if !strings.Contains(d.Out.String(), "journal append succeeded again") {
		t.Errorf("recovery not logged:\n%s", d.Out)
	}
	want := fstest.Snapshot(t, vol)
	d.Stop()
	if out, code := run(t, "journal", "verify", "--journal", jdir); code != 0 {
		t.Fatalf("journal verify after the disk filled: %s", out)
	}
	if out, code := run(t, "journal", "replay", "--journal", jdir, start); code != 0 {
		t.Fatalf("replay: %s", out)
	}
	fstest.RequireEqual(t, want, fstest.Snapshot(t, start), "replayed copy vs volume after the journal disk filled")
}

// waitWritable waits up to 10 s for the mount to take 4 MiB into p again.
func waitWritable(t *testing.T, d *fstest.Proc, p string) {
	t.Helper()
	for i := 0; ; i++ {
		err := os.WriteFile(p, make([]byte, 4<<20), 0o644)
		if err == nil {
			return
		}
		if i == 100 {
			t.Fatalf("writes still refused 10 s after the journal disk had room again: %v\n%s", err, d.Out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStopWithJournalDiskFull: a mount stopped while its journal cannot
// take the last batch exits non-zero, says so, leaves the journal marked
// unclean (the next mount resyncs backups from the volume), and does not
// hang on the way out.
func TestStopWithJournalDiskFull(t *testing.T) {
	vol, _, _ := layout(t)
	disk := fstest.SmallFS(t, 160<<20)
	_, size := fstest.FreeSpace(t, disk)
	jdir := filepath.Join(disk, "journal")
	d := startMount(t, nil, vol, jdir, "--seal-interval", "1h")
	chunk := make([]byte, 4<<20)
	for i := 0; i < 3; i++ {
		rand.Read(chunk)
		if err := os.WriteFile(filepath.Join(vol, fmt.Sprintf("f%03d", i)), chunk, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fstest.TakeSpace(t, disk, journal.DefaultReserve(size)-8<<20)
	d.Cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- d.Cmd.Wait() }()
	select {
	case err := <-done:
		var ee interface{ ExitCode() int }
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("exit after SIGINT with the journal full: %v, want status 1\n%s", err, d.Out)
		}
	case <-time.After(45 * time.Second):
		t.Fatalf("the mount did not stop within 45 s of SIGINT:\n%s", d.Out)
	}
	if !strings.Contains(d.Out.String(), "never reached the journal") {
		t.Fatalf("the lost batch is not reported:\n%s", d.Out)
	}
	d2 := startMount(t, nil, vol, jdir)
	if !strings.Contains(d2.Out.String(), "did not shut down cleanly") {
		t.Fatalf("the next mount does not know the journal is behind the volume:\n%s", d2.Out)
	}
}

// TestBackupJournalDiskFills: a backup whose journal disk fills refuses
// the batches it cannot hold (it never acks what it did not store), stays
// up, logs and counts it; the primary's barriers fail meanwhile instead of
// claiming durability; once the backup's disk has room it catches up and
// ends equal to the primary.
func TestBackupJournalDiskFills(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	c.RequireConverged()
	b := c.Backups[0]
	disk := fstest.SmallFS(t, 200<<20)
	ballast := filepath.Join(disk, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 40<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
	b.Jdir = filepath.Join(disk, "journal")
	c.StartBackup(b)
	c.RequireConverged() // a new journal: resynced from the primary

	chunk := make([]byte, 4<<20)
	barrierFailed := ""
	for i := 0; i < 60 && barrierFailed == ""; i++ {
		rand.Read(chunk)
		if err := os.WriteFile(filepath.Join(c.Vol, fmt.Sprintf("f%03d", i)), chunk, 0o644); err != nil {
			t.Fatalf("write on the primary: %v", err)
		}
		if out, code := run(t, "barrier", "--journal", c.Jdir, "--timeout", "5s"); code != 0 {
			barrierFailed = out
		}
	}
	if barrierFailed == "" {
		t.Fatalf("240 MiB through a backup with a 200 MiB journal disk and no barrier failed:\n%s", b.Out)
	}
	if conn, err := net.Dial("tcp", b.Addr); err != nil {
		t.Fatalf("the backup no longer listens (%v):\n%s", err, b.Out)
	} else {
		conn.Close()
	}
	if !strings.Contains(c.Primary.Out.String(), "journal file system is full") {
		t.Fatalf("the primary does not say why the backup refuses:\n%s", c.Primary.Out)
	}
	if out := b.Out.String(); !strings.Contains(out, "refused batches") || !strings.Contains(out, "journal file system is full") {
		t.Fatalf("the backup does not log what it refused:\n%s", out)
	}
	// Room again: the backup takes the batches, barriers return, and the
	// backup ends equal to the primary.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	c.RequireConverged()
}

// TestBackupVolumeFills: a backup whose volume's disk fills goes on
// storing and acking batches (its journal is elsewhere), says why its
// volume lags, counts the retries, and once there is room finishes the
// batch where it stopped and catches up, equal to the primary without a
// resync: with the primary gone, nobody could run one.
func TestBackupVolumeFills(t *testing.T) {
	c, disk := backupOnSmallFS(t)
	b := c.Backups[0]
	metrics := fstest.FreeAddr(t)
	b.Args = []string{"--metrics-listen", metrics}
	restart(c, b)
	c.RequireConverged()
	resyncs := strings.Count(c.Primary.Out.String(), "resync done")

	ballast := fstest.TakeSpace(t, disk, 6<<20)
	chunk := make([]byte, 1<<20)
	for i := 0; i < 16; i++ {
		rand.Read(chunk)
		if err := os.WriteFile(filepath.Join(c.Vol, fmt.Sprintf("f%02d", i)), chunk, 0o644); err != nil {
			t.Fatal(err)
		}
		if i%4 == 3 {
			c.Barrier() // durable on the backup, though not applied
		}
	}
	waitLogged(t, b.Out, "failed for want of a resource", 1, "the backup never said why its volume lags")
	url := "http://" + metrics + "/metrics"
	for deadline := time.Now().Add(10 * time.Second); fstest.ScrapeSum(t, url, "pbfs_backup_apply_retries_total", "") < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("retries not counted:\n%s", b.Out)
		}
	}
	if strings.Contains(b.Out.String(), "needs a resync") || b.Cmd.ProcessState != nil {
		t.Fatalf("the backup stalled or died with its volume full:\n%s", b.Out)
	}
	// A full disk, not an op the file system refuses: room would help.
	if out, _ := run(t, "status", "--journal", b.Jdir); !strings.Contains(out, "cannot apply batch") || !strings.Contains(out, "make room on the volume's file system") {
		t.Errorf("the backup's status does not say it waits for room:\n%s", out)
	}

	fstest.GiveSpace(t, ballast)
	c.RequireConverged()
	if out, _ := run(t, "status", "--journal", c.Jdir); strings.Contains(out, "cannot apply") {
		t.Errorf("the primary's status still says the backup cannot apply once it caught up:\n%s", out)
	}
	if n := strings.Count(c.Primary.Out.String(), "resync done"); n != resyncs {
		t.Fatalf("the backup was resynced (%d resyncs, %d before):\n%s", n, resyncs, c.Primary.Out)
	}
	waitLogged(t, b.Out, "batch applied after retries", 1, "the recovery was not logged")
}

// TestBackupTornBatchOnFullVolume: a backup killed in the middle of a
// batch restarts with its volume's disk full, so finishing the batch
// fails for want of space. It waits for room instead of stalling, then
// finishes the batch where it stopped, without a resync.
func TestBackupTornBatchOnFullVolume(t *testing.T) {
	// One batch, sealed by the barrier below: the failpoint's mark is in
	// it, and what is left of it after the mark does not fit.
	c, disk := backupOnSmallFS(t, "--seal-interval", "1h")
	b := c.Backups[0]
	resyncs := strings.Count(c.Primary.Out.String(), "resync done")
	b.Env = []string{"PBFS_FAILPOINT_APPLY_KILL=before:40"}
	restart(c, b)
	chunk := make([]byte, 1<<20)
	for i := 0; i < 8; i++ {
		rand.Read(chunk)
		if err := os.WriteFile(filepath.Join(c.Vol, fmt.Sprintf("f%02d", i)), chunk, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The backup stores the batch and dies applying it, before or after
	// its ack: the barrier may fail.
	run(t, "barrier", "--journal", c.Jdir, "--timeout", "5s")
	waitFailpointKill(t, b, "", b.Out.String)
	ballast := fstest.TakeSpace(t, disk, 256<<10)
	b.Env = nil
	c.StartBackup(b)
	waitLogged(t, b.Out, "resuming it where it stopped", 1, "the torn batch was not resumed")
	waitLogged(t, b.Out, "failed for want of a resource", 1, "the backup never said why its volume lags")
	if strings.Contains(b.Out.String(), "needs a resync") {
		t.Fatalf("the backup stalled with its volume full:\n%s", b.Out)
	}
	fstest.GiveSpace(t, ballast)
	c.RequireConverged()
	waitLogged(t, b.Out, "batch applied after retries", 1, "the recovery was not logged")
	if n := strings.Count(c.Primary.Out.String(), "resync done"); n != resyncs {
		t.Fatalf("the backup was resynced (%d resyncs, %d before):\n%s", n, resyncs, c.Primary.Out)
	}
}

// backupOnSmallFS starts a cluster of one backup whose volume is on a
// 64 MiB file system of its own (returned), resynced from the primary,
// and a primary mounted with mountArgs.
func backupOnSmallFS(t *testing.T, mountArgs ...string) (*fstest.Cluster, string) {
	c := fstest.NewCluster(t, 1, nil, mountArgs...)
	b := c.Backups[0]
	disk := fstest.SmallFS(t, 64<<20)
	b.Vol, b.Jdir = filepath.Join(disk, "vol"), filepath.Join(t.TempDir(), "journal")
	if err := os.Mkdir(b.Vol, 0o755); err != nil {
		t.Fatal(err)
	}
	restart(c, b)
	waitLogged(t, b.Out, "resync done", 1, "a backup with a new journal was not resynced")
	c.RequireConverged()
	return c, disk
}

// restart stops backup b with SIGINT and starts it again.
func restart(c *fstest.Cluster, b *fstest.BackupProc) {
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
	c.StartBackup(b)
}
