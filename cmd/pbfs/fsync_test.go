package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/journal"
)

// writeSync writes name and fsyncs it; the result arrives on the channel.
func writeSync(p string) <-chan error {
	done := make(chan error, 1)
	go func() {
		f, err := os.Create(p)
		if err == nil {
			_, err = f.WriteString("committed")
			if err == nil {
				err = f.Sync()
			}
			f.Close()
		}
		done <- err
	}()
	return done
}

// The fsync policy per path, from the mount's flags: a fsync of a *.log
// file (replicated) returns only once the backup holds it, so it waits
// while the backup is stopped; a fsync of another file (local) does not,
// nor does one of a *.wal file (deferred), which takes no barrier and is
// counted; a local-only file never reaches the backup.
func TestFsyncPolicies(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil, "--fsync-rule", "*.log=replicated", "--fsync-rule", "*.wal=deferred", "--local-only", "*.pid")
	b := c.Backups[0]
	must(t, os.WriteFile(filepath.Join(c.Vol, "x.pid"), []byte("1"), 0o644))
	fstest.Freeze(t, b.Cmd.Process)
	if err := <-writeSync(filepath.Join(c.Vol, "table.dat")); err != nil {
		t.Fatalf("local fsync: %v", err)
	}
	select {
	case err := <-writeSync(filepath.Join(c.Vol, "log.wal")):
		if err != nil {
			t.Fatalf("deferred fsync: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a deferred fsync waited while the backup was stopped")
	}
	if got := c.Primary.Counter("pbfs_fs_fsyncs_deferred_total", ""); got != 1 {
		t.Errorf("deferred fsyncs counted: %v, want 1", got)
	}
	if !strings.Contains(c.Primary.Out.String(), "deferred with no frontend plugin") {
		t.Errorf("a deferred policy with no frontend plugin started without a warning:\n%s", c.Primary.Out)
	}
	if got := c.Primary.Counter("pbfs_fs_fsync_barrier_seconds_count", ""); got != 0 {
		t.Errorf("fsyncs that took a barrier before the replicated one: %v, want 0", got)
	}
	replicated := writeSync(filepath.Join(c.Vol, "redo.log"))
	select {
	case err := <-replicated:
		t.Fatalf("a replicated fsync returned (%v) while the backup was stopped", err)
	case <-time.After(time.Second):
	}
	fstest.Thaw(b.Cmd.Process)
	select {
	case err := <-replicated:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the replicated fsync did not return after the backup came back:\n%s", c.Primary.Out)
	}
	if got := c.Primary.Counter("pbfs_fs_fsync_barrier_seconds_count", ""); got < 1 {
		t.Errorf("no replicated fsync counted")
	}
	// Durable on the backup when fsync returned: a kill -9 of the primary
	// now loses nothing of it.
	c.Primary.Kill()
	syscall.Unmount(c.Vol, syscall.MNT_DETACH)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if data, err := os.ReadFile(filepath.Join(b.Vol, "redo.log")); err == nil && string(data) == "committed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backup did not apply what the replicated fsync covered:\n%s", b.Out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(b.Vol, "x.pid")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a local-only file reached the backup: %v", err)
	}
}

// A primary that ran with the replicated or the deferred policy and
// stopped uncleanly on a machine that has rebooted since refuses its
// volume (it may lack writes the backups hold); --trust-volume overrides.
// The reboot is simulated by changing the boot id the journal recorded.
func TestRebootedReplicatedPrimaryRefused(t *testing.T) {
	fstest.RequireFUSE(t)
	for _, policy := range []string{"replicated", "deferred"} {
		t.Run(policy, func(t *testing.T) { rebootedPrimaryRefused(t, policy) })
	}
}

func rebootedPrimaryRefused(t *testing.T, policy string) {
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	must(t, os.Mkdir(vol, 0o755))
	p := fstest.StartMount(t, nil, vol, jdir, "--fsync", policy)
	must(t, os.WriteFile(filepath.Join(vol, "f"), []byte("x"), 0o644))
	p.Barrier()
	p.Kill()
	syscall.Unmount(vol, syscall.MNT_DETACH)
	s, err := journal.OpenStore(jdir, journal.StoreOptions{})
	if err != nil && !errors.Is(err, journal.ErrNeedsRecovery) {
		t.Fatal(err)
	}
	if s == nil {
		t.Fatalf("open the journal: %v", err)
	}
	must(t, s.SetMeta("boot", []byte("another-boot")))
	must(t, s.Close())
	out, err := exec.Command(fstest.Binary(t), "mount", "--journal", jdir, "--fsync", policy, vol).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "machine restarted") {
		t.Fatalf("mount after a simulated reboot: %v\n%s", err, out)
	}
	if fstest.Mounted(vol) {
		t.Fatal("mounted anyway")
	}
	p = fstest.StartMount(t, nil, vol, jdir, "--fsync", policy, "--trust-volume")
	if data, err := os.ReadFile(filepath.Join(vol, "f")); err != nil || string(data) != "x" {
		t.Fatalf("volume after --trust-volume: %q %v", data, err)
	}
}

// A hint plugin that refuses its configuration stops the start, naming
// the plugin and the reason, and leaves nothing mounted; the same plugin
// configured right mounts, and its rules keep the pid file home.
func TestHintPluginConfigRefused(t *testing.T) {
	fstest.RequireFUSE(t)
	hint := fstest.Build(t, "github.com/pbfs/pbfs/plugins/mysql-hint")
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	must(t, os.Mkdir(vol, 0o755))
	out, err := exec.Command(fstest.Binary(t), "mount", "--journal", jdir, "--plugin", "mysql="+hint,
		"--plugin-config", "mysql:datadir=/elsewhere", vol).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "hint plugin mysql") || !strings.Contains(string(out), "not on the volume") {
		t.Fatalf("mount with a refused hint config: %v\n%s", err, out)
	}
	if fstest.Mounted(vol) {
		t.Fatal("mounted anyway")
	}
	p := fstest.StartMount(t, nil, vol, jdir, "--plugin", "mysql="+hint)
	must(t, os.WriteFile(filepath.Join(vol, "host.pid"), []byte("1"), 0o644))
	must(t, os.WriteFile(filepath.Join(vol, "ibdata1"), []byte("data"), 0o644))
	p.Barrier()
	replay := t.TempDir()
	out, err = exec.Command(fstest.Binary(t), "journal", "replay", "--journal", jdir, replay).CombinedOutput()
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(replay, "ibdata1")); err != nil {
		t.Errorf("replicated file missing from the journal: %v", err)
	}
	if _, err := os.Stat(filepath.Join(replay, "host.pid")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pid file was journaled: %v", err)
	}
}

// A barrier that cannot complete says why in one line: which backups are
// missing and what state each is in, not the client's own timeout.
func TestFailedBarrierSaysWhy(t *testing.T) {
	c := fstest.NewCluster(t, 2, nil)
	down := c.Backups[1]
	down.Cmd.Process.Signal(syscall.SIGINT)
	down.Cmd.Wait()
	must(t, os.WriteFile(filepath.Join(c.Vol, "f"), []byte("x"), 0o644))
	out, code := run(t, "barrier", "--journal", c.Jdir, "--timeout", "3s")
	line := strings.TrimSpace(out)
	if code != 1 || strings.Count(line, "\n") != 0 || !strings.Contains(line, down.Addr+": unreachable since") ||
		!strings.Contains(line, "1 of 2 backups, 2 needed (--ack all)") || strings.Contains(line, c.Backups[0].Addr) {
		t.Fatalf("barrier with a backup down: exit %d:\n%s", code, out)
	}
}

// A backup that answers but refuses (here: a wrong token) is named as
// refused, not as unreachable.
func TestRefusedBackupNamedRefused(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	b := c.Backups[0]
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
	b.Args = []string{"--token", "another-secret"}
	c.StartBackup(b)
	must(t, os.WriteFile(filepath.Join(c.Vol, "f"), []byte("x"), 0o644))
	out, code := run(t, "barrier", "--journal", c.Jdir, "--timeout", "3s")
	if code != 1 || !strings.Contains(out, b.Addr+": refused since") || !strings.Contains(out, "wrong token") {
		t.Fatalf("barrier with a backup that refuses the token: exit %d:\n%s", code, out)
	}
}

// After a crash the restarted primary resyncs every backup before a
// barrier may succeed. A replicated fsync in that window waits for the
// resync and then returns, with the data on the backup; it failed with
// EIO before, so a database restarted on the volume saw its first commits
// fail. The backup is frozen across the restart to hold the resync open.
func TestReplicatedFsyncWaitsForTheResyncAfterACrash(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil, "--fsync", "replicated")
	b := c.Backups[0]
	if err := <-writeSync(filepath.Join(c.Vol, "before")); err != nil {
		t.Fatal(err)
	}
	c.Primary.Kill()
	syscall.Unmount(c.Vol, syscall.MNT_DETACH)
	fstest.Freeze(t, b.Cmd.Process)
	c.Primary = fstest.StartMount(t, nil, c.Vol, c.Jdir, "--backup", b.Addr, "--ack", "all", "--fsync", "replicated")
	if !strings.Contains(c.Primary.Out.String(), "resyncing every backup") {
		t.Fatalf("the restart after a kill -9 did not resync:\n%s", c.Primary.Out)
	}
	synced := writeSync(filepath.Join(c.Vol, "after"))
	select {
	case err := <-synced:
		t.Fatalf("a replicated fsync returned (%v) before the backup was resynced:\n%s", err, c.Primary.Out)
	case <-time.After(time.Second):
	}
	fstest.Thaw(b.Cmd.Process)
	select {
	case err := <-synced:
		if err != nil {
			t.Fatalf("the replicated fsync during the resync: %v\n%s", err, c.Primary.Out)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the replicated fsync did not return after the resync:\n%s", c.Primary.Out)
	}
	c.RequireConverged()
	if data, err := os.ReadFile(filepath.Join(b.Vol, "after")); err != nil || string(data) != "committed" {
		t.Fatalf("the backup lacks what the fsync covered: %q %v", data, err)
	}
}

// TestStopWhileReplicatedFsyncWaits: a replicated fsync waits for its
// barrier in the reader that read it. A stop forced while it waits for a
// frozen backup must still end the daemon, and the fsync must fail, not
// hang with the reader.
func TestStopWhileReplicatedFsyncWaits(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil, "--fsync", "replicated")
	c.SkipChecks(t, "the primary is stopped by force with a commit the backup never acked")
	fstest.Freeze(t, c.Backups[0].Cmd.Process)
	done := writeSync(filepath.Join(c.Vol, "f"))
	select {
	case err := <-done:
		t.Fatalf("a replicated fsync returned with the backup frozen: %v", err)
	case <-time.After(time.Second):
	}
	p := c.Primary
	p.Cmd.Process.Signal(syscall.SIGTERM)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.Out.String(), "signal received"); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first signal is not reported:\n%s", p.Out)
		}
	}
	time.Sleep(repeatWindow)
	p.Cmd.Process.Signal(syscall.SIGTERM) // the fsync holds its file open: stop at once
	waitExit(t, p, 20*time.Second)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the fsync succeeded, though the backup never acked it")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the fsync is still stuck after the daemon stopped")
	}
}
