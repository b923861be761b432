package main

import (
	"context"
	"fmt"
	"net"
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

const testToken = "test-token-0123456789"

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// cluster is a primary mount and its backups, each a real process.
type cluster struct {
	t       *testing.T
	dir     string
	vol     string
	jdir    string
	primary *fstest.Proc
	backups []*backupProc
}

type backupProc struct {
	addr, vol, jdir string
	cmd             *exec.Cmd
	out             *fstest.Buffer
}

func newCluster(t *testing.T, backups int, seed func(string), mountArgs ...string) *cluster {
	return newClusterCopy(t, backups, seed, true, mountArgs...)
}

// newClusterCopy starts the backups on copies of the seeded volume, or, with
// copy false, on empty directories that a resync must fill.
func newClusterCopy(t *testing.T, backups int, seed func(string), copy bool, mountArgs ...string) *cluster {
	fstest.RequireFUSE(t)
	c := &cluster{t: t, dir: t.TempDir()}
	c.vol, c.jdir = filepath.Join(c.dir, "vol"), filepath.Join(c.dir, "jp")
	os.Mkdir(c.vol, 0o755)
	if seed != nil {
		seed(c.vol)
	}
	for i := 0; i < backups; i++ {
		b := &backupProc{addr: freeAddr(t), vol: filepath.Join(c.dir, fmt.Sprintf("b%d", i)), jdir: filepath.Join(c.dir, fmt.Sprintf("jb%d", i))}
		os.Mkdir(b.vol, 0o755)
		if copy {
			fstest.CopyTree(t, c.vol, b.vol)
		}
		c.backups = append(c.backups, b)
		c.startBackup(b)
	}
	var args []string
	for _, b := range c.backups {
		args = append(args, "--backup", b.addr)
	}
	os.Setenv("PBFS_TOKEN", testToken)
	c.primary = startMount(t, nil, c.vol, c.jdir, append(append(args, "--ack", "all"), mountArgs...)...)
	return c
}

func (c *cluster) startBackup(b *backupProc) {
	b.cmd = exec.Command(pbfsBin, "backup", "--listen", b.addr, "--journal", b.jdir, "--token", testToken, b.vol)
	b.out = &fstest.Buffer{}
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	cmd := b.cmd
	c.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGINT)
			cmd.Wait()
		}
	})
	for i := 0; i < 200; i++ {
		if conn, err := net.Dial("tcp", b.addr); err == nil {
			conn.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("backup did not come up:\n%s", b.out)
}

func (c *cluster) barrier() uint64 {
	c.t.Helper()
	cl, err := control.Dial(c.jdir)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seq, err := cl.Barrier(ctx)
	if err != nil {
		c.t.Fatalf("barrier: %v\nprimary:\n%s", err, c.primary.Out)
	}
	return seq
}

// waitApplied waits until every backup has applied seq.
func (c *cluster) waitApplied(seq uint64) {
	c.t.Helper()
	cl, _ := control.Dial(c.jdir)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := cl.Status(context.Background())
		if err == nil {
			done := 0
			for _, b := range st.Backups {
				if b.AppliedSeq >= seq {
					done++
				}
			}
			if done == len(c.backups) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, _ := cl.Status(context.Background())
	c.t.Fatalf("backups did not apply seq %d: %+v", seq, st.Backups)
}

func (c *cluster) requireConverged() {
	c.t.Helper()
	c.waitApplied(c.barrier())
	want := fstest.Snapshot(c.t, c.vol)
	for i, b := range c.backups {
		fstest.RequireEqual(c.t, want, fstest.Snapshot(c.t, b.vol), fmt.Sprintf("backup %d vs primary", i))
	}
}

// workload runs the randomized concurrent workload against the volume
// with barriers at random moments; midway runs at half time.
func (c *cluster) workload(seed uint64, steps int, midway func()) {
	fstest.NewWorkload(c.vol, false).Run(seed, 3, steps, func() { c.barrier() }, midway)
}

// TestReplicatedWorkloadConverges is the replication end to end: a primary
// and two backup processes on loopback, the randomized concurrent workload
// on the mount, and after a barrier both backups equal the primary.
func TestReplicatedWorkloadConverges(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			w := fstest.NewWorkload("", false)
			c := newCluster(t, 2, w.Seed)
			c.workload(seed, 200, nil)
			c.requireConverged()
		})
	}
}

// TestBackupKilledAndRestartedConverges kill -9s a backup in the middle
// of the workload and restarts it: it catches up from the primary's
// journal and ends equal.
func TestBackupKilledAndRestartedConverges(t *testing.T) {
	w := fstest.NewWorkload("", false)
	c := newCluster(t, 2, w.Seed)
	b := c.backups[0]
	c.workload(7, 240, func() {
		b.cmd.Process.Kill()
		b.cmd.Wait()
		time.Sleep(100 * time.Millisecond)
		c.startBackup(b)
	})
	c.requireConverged()
}

// TestPrimaryKilledKeepsAckedWrites: every write whose barrier returned is
// on both backups after the primary is killed with kill -9.
func TestPrimaryKilledKeepsAckedWrites(t *testing.T) {
	c := newCluster(t, 2, nil)
	acked := 0
	for i := 0; i < 30; i++ {
		if err := os.WriteFile(filepath.Join(c.vol, fmt.Sprintf("req%02d", i)), []byte(fmt.Sprint("payload ", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		c.barrier()
		acked = i + 1
	}
	os.WriteFile(filepath.Join(c.vol, "unacked"), []byte("x"), 0o644)
	c.primary.Kill()
	syscall.Unmount(c.vol, syscall.MNT_DETACH)
	for _, b := range c.backups {
		deadline := time.Now().Add(20 * time.Second)
		last := filepath.Join(b.vol, fmt.Sprintf("req%02d", acked-1))
		for {
			if _, err := os.Stat(last); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("backup %s never applied the last acked write:\n%s", b.addr, b.out)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for i := 0; i < acked; i++ {
			data, err := os.ReadFile(filepath.Join(b.vol, fmt.Sprintf("req%02d", i)))
			if err != nil || string(data) != fmt.Sprint("payload ", i) {
				t.Fatalf("backup %s lost acked write %d: %q %v", b.addr, i, data, err)
			}
		}
	}
}

// TestDeadBackupBlocksBarriers: with --ack all and no degrade policy, a
// dead backup holds every barrier (the client sees a timeout, never an
// early return), and the barrier completes once the backup is back.
func TestDeadBackupBlocksBarriers(t *testing.T) {
	c := newCluster(t, 2, nil)
	b := c.backups[0]
	b.cmd.Process.Kill()
	b.cmd.Wait()
	os.WriteFile(filepath.Join(c.vol, "held"), []byte("must not be acknowledged yet"), 0o644)
	cl, _ := control.Dial(c.jdir)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if seq, err := cl.Barrier(ctx); err == nil {
		t.Fatalf("barrier returned seq %d with a backup of the ack set dead", seq)
	}
	c.startBackup(b)
	c.requireConverged()
}

// TestDeadBackupDegrades: with --degrade-after, a dead backup leaves the
// ack set after the timeout (barriers complete again), is reported stale
// and logged, and rejoins once it has caught up.
func TestDeadBackupDegrades(t *testing.T) {
	c := newCluster(t, 2, nil, "--degrade-after", "500ms")
	b := c.backups[0]
	b.cmd.Process.Kill()
	b.cmd.Wait()
	os.WriteFile(filepath.Join(c.vol, "f"), []byte("written while degraded"), 0o644)
	start := time.Now()
	c.barrier()
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("barrier returned after %v, before the degrade timeout", d)
	}
	cl, _ := control.Dial(c.jdir)
	st, _ := cl.Status(context.Background())
	if !st.Backups[0].Degraded || !st.Backups[0].Stale {
		t.Fatalf("dead backup not reported degraded and stale: %+v", st.Backups)
	}
	if !strings.Contains(c.primary.Out.String(), "dropped from the ack set") {
		t.Fatalf("no log line for the degraded backup:\n%s", c.primary.Out)
	}
	c.startBackup(b)
	c.requireConverged()
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

// TestRetentionTrimsAckedBatches: batches every backup holds are trimmed
// once older than --retain; the journal still verifies and the backup
// still converges.
func TestRetentionTrimsAckedBatches(t *testing.T) {
	c := newCluster(t, 1, nil, "--retain", "200ms")
	for i := 0; i < 20; i++ {
		os.WriteFile(filepath.Join(c.vol, fmt.Sprintf("f%d", i)), []byte("data"), 0o644)
		c.barrier()
	}
	cl, _ := control.Dial(c.jdir)
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
	if out, code := run(t, "journal", "verify", "--journal", c.jdir); code != 0 {
		t.Fatalf("verify after trimming: %s", out)
	}
	os.WriteFile(filepath.Join(c.vol, "after"), []byte("x"), 0o644)
	c.requireConverged()
	if n := c.primary.Counter("pbfs_journal_trimmed_batches_total", ""); n < 10 {
		t.Fatalf("trimmed counter %v", n)
	}
}

// TestCrashedPrimaryResyncsBackups: a primary killed with kill -9 may have
// applied writes it never journaled. Restarted with backups, it resyncs
// them to its volume before any barrier succeeds, so they never differ.
func TestCrashedPrimaryResyncsBackups(t *testing.T) {
	c := newCluster(t, 1, nil)
	os.WriteFile(filepath.Join(c.vol, "a"), []byte("A"), 0o644)
	c.barrier()
	f, _ := os.OpenFile(filepath.Join(c.vol, "a"), os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte("B, never acknowledged, perhaps never journaled"))
	f.Close()
	c.primary.Kill()
	c.primary = startMount(t, nil, c.vol, c.jdir, "--backup", c.backups[0].addr)
	if !strings.Contains(c.primary.Out.String(), "resyncing every backup") {
		t.Fatalf("no resync announced after the crash:\n%s", c.primary.Out)
	}
	os.WriteFile(filepath.Join(c.vol, "c"), []byte("C"), 0o644)
	deadline := time.Now().Add(20 * time.Second)
	for {
		cl, _ := control.Dial(c.jdir)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cl.Barrier(ctx)
		cancel()
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "resync") && !strings.Contains(err.Error(), "deadline") {
			t.Fatalf("barrier after a crash: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("barriers never resumed:\n%s", c.primary.Out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.requireConverged()
}

// TestNewEpochFencesTheOldPrimary: a second primary with a higher epoch
// reaches the backup; from then on the old primary can never complete a
// barrier again.
func TestNewEpochFencesTheOldPrimary(t *testing.T) {
	c := newCluster(t, 1, nil)
	os.WriteFile(filepath.Join(c.vol, "a"), []byte("A"), 0o644)
	c.barrier()
	// The new primary: a copy of the volume and of the journal, a new term.
	dir := t.TempDir()
	vol2, j2 := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	os.Mkdir(vol2, 0o755)
	fstest.CopyTree(t, c.vol, vol2)
	if out, err := exec.Command("cp", "-a", c.jdir, j2).CombinedOutput(); err != nil {
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
	p2 := startMount(t, nil, vol2, j2, "--backup", c.backups[0].addr, "--epoch", "2")
	os.WriteFile(filepath.Join(vol2, "b"), []byte("B"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p2.Client().Barrier(ctx); err != nil {
		t.Fatalf("new primary's barrier: %v\n%s", err, p2.Out)
	}
	os.WriteFile(filepath.Join(c.vol, "stale"), []byte("from the deposed primary"), 0o644)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	cl, _ := control.Dial(c.jdir)
	if seq, err := cl.Barrier(ctx2); err == nil {
		t.Fatalf("the deposed primary completed a barrier (seq %d)", seq)
	}
	if _, err := os.Stat(filepath.Join(c.backups[0].vol, "stale")); err == nil {
		t.Fatal("the deposed primary's write reached the backup")
	}
}

// TestNewEmptyBackupJoinsUnderLoad: a backup that starts empty is resynced
// from the live primary while the workload runs, and ends equal.
func TestNewEmptyBackupJoinsUnderLoad(t *testing.T) {
	w := fstest.NewWorkload("", false)
	c := newClusterCopy(t, 1, w.Seed, false)
	c.workload(11, 200, nil)
	c.requireConverged()
	if !strings.Contains(c.primary.Out.String(), "resync done") {
		t.Fatalf("no resync logged:\n%s", c.primary.Out)
	}
}

// TestAlteredBackupIsResynced: files changed, added and removed on a
// backup behind its back are found by the block checksums of a resync
// and put right.
func TestAlteredBackupIsResynced(t *testing.T) {
	w := fstest.NewWorkload("", false)
	c := newCluster(t, 1, w.Seed)
	c.workload(12, 100, nil)
	c.requireConverged()
	b := c.backups[0]
	b.cmd.Process.Signal(syscall.SIGINT)
	b.cmd.Wait()
	var victim string
	filepath.Walk(b.vol, func(p string, fi os.FileInfo, err error) error {
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
	os.WriteFile(filepath.Join(b.vol, "intruder"), []byte("x"), 0o644)
	before := strings.Count(c.primary.Out.String(), "resync done")
	c.startBackup(b)
	if out, code := run(t, "resync", "--journal", c.jdir); code != 0 {
		t.Fatalf("resync: %s", out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(c.primary.Out.String(), "resync done") == before {
		if time.Now().After(deadline) {
			t.Fatalf("no resync:\n%s", c.primary.Out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.requireConverged()
	last := c.primary.Out.String()[strings.LastIndex(c.primary.Out.String(), "resync done"):]
	if strings.Contains(last, "files_differed=0 ") {
		t.Fatalf("the resync found nothing to fix: %s", last)
	}
}
