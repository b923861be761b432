package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/journal"
)

// TestReplicatedWorkloadConverges is the replication end to end: a primary
// and two backup processes on loopback, the randomized concurrent workload
// on the mount, and after a barrier both backups equal the primary.
func TestReplicatedWorkloadConverges(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			w := fstest.NewWorkload("", false)
			c := fstest.NewCluster(t, 2, w.Seed)
			c.Workload(seed, 200, nil)
			c.RequireConverged()
		})
	}
}

// TestBackupKilledAndRestartedConverges kill -9s a backup in the middle
// of the workload and restarts it: it catches up from the primary's
// journal and ends equal.
func TestBackupKilledAndRestartedConverges(t *testing.T) {
	w := fstest.NewWorkload("", false)
	c := fstest.NewCluster(t, 2, w.Seed)
	b := c.Backups[0]
	c.Workload(7, 240, func() {
		b.Cmd.Process.Kill()
		b.Cmd.Wait()
		time.Sleep(100 * time.Millisecond)
		c.StartBackup(b)
	})
	c.RequireConverged()
}

// TestBackupKilledMidApplyResumes: a backup killed with -9 while it
// applies a batch that reuses names (temp file, rename over the live name,
// as services write) finishes that batch exactly on restart, on its own:
// it must not stall and wait for a resync, because its primary may be
// gone too. Each round the backup kills itself (a failpoint, SIGKILL) at a
// different apply mark, before or after writing it, while the primary
// keeps writing; a kill -9 from outside landed mid-batch only by luck.
func TestBackupKilledMidApplyResumes(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	b := c.Backups[0]
	// A backup whose journal is empty is resynced when it connects, and a
	// resync that finds the rounds' writes done applies no batch: give it
	// a batch first, so every restart catches up from the stream.
	if err := os.WriteFile(filepath.Join(c.Vol, "first"), []byte("first batch"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.RequireConverged()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 2048)
	var logs strings.Builder
	// What the backup logged before: its first resync.
	first := len(b.Out.String())
	const rounds = 4
	for round := 0; round < rounds; round++ {
		when := []string{"before", "after"}[round%2]
		b.Cmd.Process.Signal(syscall.SIGINT)
		b.Cmd.Wait()
		logs.WriteString(b.Out.String()[first:])
		first = 0
		b.Env = []string{fmt.Sprintf("PBFS_FAILPOINT_APPLY_KILL=%s:%d", when, 40+53*round)}
		c.StartBackup(b)
		for i := 0; i < 150; i++ {
			tmp := filepath.Join(c.Vol, fmt.Sprintf(".tmp-%d-%d", round, i))
			if err := os.WriteFile(tmp, append(payload, byte(round), byte(i)), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(c.Vol, fmt.Sprintf("f%d", i%20))); err != nil {
				t.Fatal(err)
			}
		}
		waitFailpointKill(t, b, fmt.Sprintf("round %d: ", round), func() string {
			return logs.String() + b.Out.String() + "\nprimary:\n" + c.Primary.Out.String()
		})
		logs.WriteString(b.Out.String())
		b.Env = nil
		c.StartBackup(b)
		c.RequireConverged()
	}
	logs.WriteString(b.Out.String())
	all := logs.String()
	if strings.Contains(all, "needs a resync") || strings.Contains(all, "resync: ") {
		t.Fatalf("the backup needed a resync:\n%s", all)
	}
	if n := strings.Count(all, "resuming it where it stopped"); n != rounds {
		t.Fatalf("%d of %d restarts resumed a batch where it stopped, want all:\n%s", n, rounds, all)
	}
}

// waitFailpointKill waits up to 30 s for backup b to kill itself at its
// PBFS_FAILPOINT_APPLY_KILL failpoint; on failure it reaps b (Cleanup must
// not Wait for it too) and fails, the message prefixed with what, showing
// logs().
func waitFailpointKill(t *testing.T, b *fstest.BackupProc, what string, logs func() string) {
	t.Helper()
	exited := make(chan struct{})
	go func() { b.Cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		b.Cmd.Process.Kill()
		<-exited
		t.Fatalf("%sthe backup did not reach its failpoint:\n%s", what, logs())
	}
	if ws, ok := b.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("%sthe backup exited with %v, not killed by its failpoint:\n%s", what, b.Cmd.ProcessState, b.Out)
	}
}

// waitLogged waits up to 20 s until out holds what n times.
func waitLogged(t *testing.T, out *fstest.Buffer, what string, n int, failure string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); strings.Count(out.String(), what) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s:\n%s", failure, out)
		}
	}
}

// TestResyncAskedWhileBackupDown: `pbfs resync` while a backup is down is
// not forgotten when the attempt fails: the backup is resynced once back.
func TestResyncAskedWhileBackupDown(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	c.RequireConverged() // past the first resync of the new backup
	b := c.Backups[0]
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
	before := strings.Count(c.Primary.Out.String(), "resync done")
	failed := strings.Count(c.Primary.Out.String(), "the resync asked for cannot start yet")
	if out, code := run(t, "resync", "--journal", c.Jdir); code != 0 {
		t.Fatalf("resync: %s", out)
	}
	waitLogged(t, c.Primary.Out, "the resync asked for cannot start yet", failed+1, "the primary never tried")
	c.StartBackup(b)
	waitLogged(t, c.Primary.Out, "resync done", before+1, "the requested resync was forgotten")
	c.RequireConverged()
}

// TestPrimaryKilledKeepsAckedWrites: every write whose barrier returned is
// on both backups after the primary is killed with kill -9.
func TestPrimaryKilledKeepsAckedWrites(t *testing.T) {
	c := fstest.NewCluster(t, 2, nil)
	acked := 0
	for i := 0; i < 30; i++ {
		if err := os.WriteFile(filepath.Join(c.Vol, fmt.Sprintf("req%02d", i)), []byte(fmt.Sprint("payload ", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		c.Barrier()
		acked = i + 1
	}
	os.WriteFile(filepath.Join(c.Vol, "unacked"), []byte("x"), 0o644)
	c.Primary.Kill()
	syscall.Unmount(c.Vol, syscall.MNT_DETACH)
	for _, b := range c.Backups {
		deadline := time.Now().Add(20 * time.Second)
		last := filepath.Join(b.Vol, fmt.Sprintf("req%02d", acked-1))
		for {
			if _, err := os.Stat(last); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("backup %s never applied the last acked write:\n%s", b.Addr, b.Out)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for i := 0; i < acked; i++ {
			data, err := os.ReadFile(filepath.Join(b.Vol, fmt.Sprintf("req%02d", i)))
			if err != nil || string(data) != fmt.Sprint("payload ", i) {
				t.Fatalf("backup %s lost acked write %d: %q %v", b.Addr, i, data, err)
			}
		}
	}
}

// TestRetentionTrimsAckedBatches: batches every backup holds are trimmed
// once older than --retain; the journal still verifies and the backup
// still converges.
func TestRetentionTrimsAckedBatches(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil, "--retain", "200ms")
	for i := 0; i < 20; i++ {
		os.WriteFile(filepath.Join(c.Vol, fmt.Sprintf("f%d", i)), []byte("data"), 0o644)
		c.Barrier()
	}
	cl, _ := control.Dial(c.Jdir)
	deadline := time.Now().Add(10 * time.Second)
	for {
		first := uint64(0)
		cl.Scan(0, func(seq uint64, _ []byte) error {
			if first == 0 {
				first = seq
			}
			return nil
		})
		if first > 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("journal not trimmed: first seq %d", first)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, code := run(t, "journal", "verify", "--journal", c.Jdir); code != 0 {
		t.Fatalf("verify after trimming: %s", out)
	}
	os.WriteFile(filepath.Join(c.Vol, "after"), []byte("x"), 0o644)
	c.RequireConverged()
	if n := c.Primary.Counter("pbfs_journal_trimmed_batches_total", ""); n < 10 {
		t.Fatalf("trimmed counter %v", n)
	}
}

// TestCrashedPrimaryResyncsBackups: a primary killed with kill -9 may have
// applied writes it never journaled. Restarted with backups, it resyncs
// them to its volume before any barrier succeeds, so they never differ.
func TestCrashedPrimaryResyncsBackups(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	os.WriteFile(filepath.Join(c.Vol, "a"), []byte("A"), 0o644)
	c.Barrier()
	f, _ := os.OpenFile(filepath.Join(c.Vol, "a"), os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte("B, never acknowledged, perhaps never journaled"))
	f.Close()
	c.Primary.Kill()
	c.Primary = startMount(t, nil, c.Vol, c.Jdir, "--backup", c.Backups[0].Addr)
	if !strings.Contains(c.Primary.Out.String(), "resyncing every backup") {
		t.Fatalf("no resync announced after the crash:\n%s", c.Primary.Out)
	}
	os.WriteFile(filepath.Join(c.Vol, "c"), []byte("C"), 0o644)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Primary.Client().Barrier(ctx)
		cancel()
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "resync") && !strings.Contains(err.Error(), "deadline") {
			t.Fatalf("barrier after a crash: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("barriers never resumed:\n%s", c.Primary.Out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.RequireConverged()
}

// TestNewEpochFencesTheOldPrimary: a second primary with a higher epoch
// reaches the backup; from then on the old primary can never complete a
// barrier again.
func TestNewEpochFencesTheOldPrimary(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	os.WriteFile(filepath.Join(c.Vol, "a"), []byte("A"), 0o644)
	c.Barrier()
	// The new primary: a copy of the volume and of the journal, a new term.
	dir := t.TempDir()
	vol2, j2 := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	os.Mkdir(vol2, 0o755)
	fstest.CopyTree(t, c.Vol, vol2)
	if out, err := exec.Command("cp", "-a", c.Jdir, j2).CombinedOutput(); err != nil {
		t.Fatalf("copy journal: %v %s", err, out)
	}
	os.Remove(filepath.Join(j2, "control.sock"))
	// The copy was taken while the old primary ran; mark it closed, as the
	// journal of a promoted node that is up to date would be.
	st, err := journal.OpenStore(j2, journal.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st.MarkClosed()
	st.Close()
	p2 := startMount(t, nil, vol2, j2, "--backup", c.Backups[0].Addr, "--epoch", "2")
	os.WriteFile(filepath.Join(vol2, "b"), []byte("B"), 0o644)
	// The copied volume has no fingerprint of a clean stop to vouch for
	// it, so the new primary resyncs the backup first.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := p2.Client().Barrier(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("new primary's barrier: %v\n%s", err, p2.Out)
		}
	}
	os.WriteFile(filepath.Join(c.Vol, "stale"), []byte("from the deposed primary"), 0o644)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	cl, _ := control.Dial(c.Jdir)
	if seq, err := cl.Barrier(ctx2); err == nil {
		t.Fatalf("the deposed primary completed a barrier (seq %d)", seq)
	}
	if _, err := os.Stat(filepath.Join(c.Backups[0].Vol, "stale")); err == nil {
		t.Fatal("the deposed primary's write reached the backup")
	}
	// Killed and restarted, the deposed primary finds its volume changed
	// and resyncs: the backup refuses that too, and its barriers fail
	// with "deposed" instead of waiting for an ack that never comes.
	c.Primary.Kill()
	c.Primary = startMount(t, nil, c.Vol, c.Jdir, "--backup", c.Backups[0].Addr)
	os.WriteFile(filepath.Join(c.Vol, "stale2"), []byte("from the restarted deposed primary"), 0o644)
	ctx3, cancel3 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel3()
	if seq, err := c.Primary.Client().Barrier(ctx3); err == nil {
		t.Fatalf("the restarted deposed primary completed a barrier (seq %d)", seq)
	} else if !strings.Contains(err.Error(), "deposed") {
		t.Fatalf("the restarted deposed primary's barrier: %v, want deposed\n%s", err, c.Primary.Out)
	}
	if _, err := os.Stat(filepath.Join(c.Backups[0].Vol, "stale2")); err == nil {
		t.Fatal("the restarted deposed primary's write reached the backup")
	}
}

// TestNewEmptyBackupJoinsUnderLoad: a backup that starts empty is resynced
// from the live primary while the workload runs, and ends equal.
func TestNewEmptyBackupJoinsUnderLoad(t *testing.T) {
	w := fstest.NewWorkload("", false)
	c := fstest.NewClusterCopy(t, 1, w.Seed, false)
	c.Workload(11, 200, nil)
	c.RequireConverged()
	if !strings.Contains(c.Primary.Out.String(), "resync done") {
		t.Fatalf("no resync logged:\n%s", c.Primary.Out)
	}
}

// TestAlteredBackupIsResynced: files changed, added and removed on a
// backup behind its back are found by the block checksums of a resync
// and put right.
func TestAlteredBackupIsResynced(t *testing.T) {
	w := fstest.NewWorkload("", false)
	c := fstest.NewCluster(t, 1, w.Seed)
	c.Workload(12, 100, nil)
	c.RequireConverged()
	b := c.Backups[0]
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
	var victim string
	filepath.Walk(b.Vol, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() > 10 && victim == "" {
			victim = p
		}
		return nil
	})
	if victim == "" {
		t.Fatal("no file to alter")
	}
	f, _ := os.OpenFile(victim, os.O_WRONLY, 0)
	f.WriteAt([]byte("ALTERED BEHIND ITS BACK"), 3)
	f.Close()
	os.WriteFile(filepath.Join(b.Vol, "intruder"), []byte("x"), 0o644)
	before := strings.Count(c.Primary.Out.String(), "resync done")
	c.StartBackup(b)
	if out, code := run(t, "resync", "--journal", c.Jdir); code != 0 {
		t.Fatalf("resync: %s", out)
	}
	waitLogged(t, c.Primary.Out, "resync done", before+1, "no resync")
	c.RequireConverged()
	last := c.Primary.Out.String()[strings.LastIndex(c.Primary.Out.String(), "resync done"):]
	if strings.Contains(last, "files_differed=0 ") {
		t.Fatalf("the resync found nothing to fix: %s", last)
	}
}
