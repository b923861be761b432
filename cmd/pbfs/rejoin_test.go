package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/backup"
)

// A deposed primary rejoining resyncs only what the two histories touched
// since they parted (docs/ARCHITECTURE.md, "Resync"): its own batches the
// new primary never received, what it changed after its last batch, and
// the new primary's batches since; the rest of the volume is equal on both
// already.

const (
	rejoinDirs  = 40
	rejoinFiles = 75 // 3,000 files in all
)

// seedFiles lays out rejoinDirs directories of rejoinFiles small files.
func seedFiles(vol string) {
	for d := 0; d < rejoinDirs; d++ {
		dir := filepath.Join(vol, fmt.Sprintf("d%02d", d))
		os.Mkdir(dir, 0o755)
		for f := 0; f < rejoinFiles; f++ {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), fileData(d, f, 0), 0o644)
		}
	}
}

// fileData is the content of file f of directory d, generation gen.
func fileData(d, f, gen int) []byte {
	line := fmt.Sprintf("dir %d file %d generation %d\n", d, f, gen)
	return []byte(strings.Repeat(line, 3000/len(line)+1))
}

func vpath(vol string, d, f int) string {
	return filepath.Join(vol, fmt.Sprintf("d%02d", d), fmt.Sprintf("f%03d", f))
}

// touch changes a few paths of vol: a file rewritten, one created, one
// removed, a directory renamed, a mode changed; each in its own
// directories (base picks them).
func touch(t *testing.T, vol string, base int, tag string) {
	t.Helper()
	must(t, os.WriteFile(vpath(vol, base, 1), fileData(base, 1, 1), 0o644))
	must(t, os.WriteFile(filepath.Join(vol, fmt.Sprintf("d%02d", base+1), tag), []byte("new on "+tag), 0o644))
	must(t, os.Remove(vpath(vol, base+2, 2)))
	must(t, os.Rename(filepath.Join(vol, fmt.Sprintf("d%02d", base+3)), filepath.Join(vol, fmt.Sprintf("d%02d-%s", base+3, tag))))
	must(t, os.Chmod(vpath(vol, base+4, 4), 0o600))
}

// history is what each side writes after the histories part: old on the
// primary that is deposed (journaled), new on the backup promoted.
type history struct {
	old, new func(vol string)
	// edit, if set, changes the deposed primary's journal before it
	// rejoins.
	edit func(*journal.Store)
}

// depose writes history the backup shares (acknowledged), then, with the
// backup frozen, h.old (journaled on the primary only); then kills both
// with -9 (the backup with what it never read of the stream), runs h.edit,
// promotes the backup, starts the old primary as a backup of it, and runs
// h.new on the new primary. It returns the old primary, now a backup.
func depose(t *testing.T, c *fstest.Cluster, h history) *fstest.BackupProc {
	t.Helper()
	b := c.Backups[0]
	c.WaitApplied(c.Barrier())
	// The walk of the old primary's volume takes in every ctime from 2 s
	// before its last batch on: the seeded files too, were they that fresh.
	time.Sleep(2500 * time.Millisecond)
	touch(t, c.Vol, 0, "both")
	shared := c.Barrier()
	c.WaitApplied(shared)
	fstest.Freeze(t, b.Cmd.Process)
	h.old(c.Vol)
	time.Sleep(200 * time.Millisecond) // sealed: the seal interval is 50 ms
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, err := c.Primary.Client().Status(t.Context()); err == nil && st.LastSeq > shared {
			break // journaled
		}
		if time.Now().After(deadline) {
			t.Fatalf("the primary journals nothing of its suffix:\n%s", c.Primary.Out)
		}
	}
	c.Primary.Kill()
	syscall.Unmount(c.Vol, syscall.MNT_DETACH)
	b.Cmd.Process.Kill()
	b.Cmd.Wait()
	fstest.DetachAll(b.Vol)
	if h.edit != nil {
		st, err := journal.OpenStore(c.Jdir, journal.StoreOptions{})
		if err != nil && !errors.Is(err, journal.ErrNeedsRecovery) {
			t.Fatal(err)
		}
		if st == nil {
			t.Fatalf("open the old primary's journal: %v", err)
		}
		h.edit(st)
		must(t, st.Close())
	}
	return promote(t, c, h.new)
}

// promote promotes the cluster's stopped backup, then starts the old
// primary, stopped, as a backup of it (once promoted: it holds more than
// the backup, which a promotion by hand would refuse); then runs on the
// new primary's volume before that.
func promote(t *testing.T, c *fstest.Cluster, then func(vol string)) *fstest.BackupProc {
	t.Helper()
	b := c.Backups[0]
	old := &fstest.BackupProc{Addr: fstest.FreeAddr(t), Vol: c.Vol, Jdir: c.Jdir}
	p := fstest.StartPromote(t, b.Vol, b.Jdir, "--backup", old.Addr, "--token", fstest.TestToken)
	then(b.Vol) // before the resync's snapshot
	c.StartBackup(old)
	c.Primary, c.Vol, c.Jdir, c.Backups = p, b.Vol, b.Jdir, []*fstest.BackupProc{old}
	return old
}

// touched is a history of touch on either side.
func touched(t *testing.T) history {
	return history{old: func(vol string) { touch(t, vol, 10, "old") }, new: func(vol string) { touch(t, vol, 20, "new") }}
}

// resyncCounts is what the new primary counted of its resyncs.
func resyncCounts(t *testing.T, c *fstest.Cluster) (targeted, full, entries, blocks float64) {
	p := c.Primary
	targeted, full = p.Counter("pbfs_replicate_resyncs_total", `kind="targeted"`), p.Counter("pbfs_replicate_resyncs_total", `kind="full"`)
	entries = p.Counter("pbfs_replicate_resync_entries_total", `kind="targeted"`)
	blocks = p.Counter("pbfs_replicate_resync_blocks_total", `kind="targeted"`)
	t.Logf("resyncs: %v targeted (%v entries, %v blocks sent), %v full", targeted, entries, blocks, full)
	return
}

// requireTargeted checks that the new primary resynced the old one once,
// targeted, listing from lo to hi entries and sending at most hi blocks.
func requireTargeted(t *testing.T, c *fstest.Cluster, old *fstest.BackupProc, lo, hi float64) {
	t.Helper()
	targeted, full, entries, blocks := resyncCounts(t, c)
	if targeted != 1 || full != 0 {
		t.Fatalf("resyncs of the old primary: %v targeted, %v full; want one targeted:\n%s\nold primary:\n%s", targeted, full, c.Primary.Out, old.Out)
	}
	if entries < lo || entries > hi || blocks > hi {
		t.Fatalf("the targeted resync listed %v entries and sent %v blocks; want %v to %v", entries, blocks, lo, hi)
	}
	if !strings.Contains(old.Out.String(), "resync: targeted") {
		t.Fatalf("the old primary's log does not say its resync was targeted:\n%s", old.Out)
	}
}

// requireFull checks that the new primary resynced the old one once, in
// full.
func requireFull(t *testing.T, c *fstest.Cluster) {
	t.Helper()
	if targeted, full, _, _ := resyncCounts(t, c); targeted != 0 || full != 1 {
		t.Fatalf("resyncs of the old primary: %v targeted, %v full; want one full:\n%s", targeted, full, c.Primary.Out)
	}
}

// TestDeposedPrimaryResyncsWhatItTouched: a primary killed with -9 after
// writing batches its backup never received; the backup promoted, writing
// on; the old primary rejoins: its resync lists only the paths either
// history touched since they parted, and it ends equal to the new primary
// (allocation included).
func TestDeposedPrimaryResyncsWhatItTouched(t *testing.T) {
	c := fstest.NewCluster(t, 1, seedFiles, "--local-only", "**/*.pid")
	// Local-only on the old primary, never shipped: they go, as a full
	// resync removes them.
	for _, p := range []string{"x.pid", "d35/y.pid"} {
		must(t, os.WriteFile(filepath.Join(c.Vol, p), []byte("1"), 0o644))
	}
	old := depose(t, c, touched(t))
	c.RequireConverged()
	// Three renamed directories of 75 files each, and a handful more: far
	// from the 3,043 entries of the volume.
	requireTargeted(t, c, old, 75, 400)
	for _, p := range []string{"d11/old", "x.pid", "d35/y.pid"} {
		if _, err := os.Stat(filepath.Join(old.Vol, p)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s, which the new primary lacks, is still on the old one: %v", p, err)
		}
	}
}

// TestDeposedPrimaryHardLinks: a file with two names, written through one
// of them by one history, and that name removed in a later batch: the
// other name alone holds what changed, and no batch names it. A targeted
// resync reconciles every name of a file it touches, on either side.
func TestDeposedPrimaryHardLinks(t *testing.T) {
	c := fstest.NewCluster(t, 1, seedFiles)
	for _, d := range []int{5, 7} {
		must(t, os.Link(vpath(c.Vol, d, 0), filepath.Join(c.Vol, fmt.Sprintf("d%02d", d), "link")))
	}
	writeRemove := func(p string) {
		must(t, os.WriteFile(p, []byte("rewritten through "+p), 0o644))
		time.Sleep(200 * time.Millisecond) // sealed: this batch names p
		must(t, os.Remove(p))
	}
	old := depose(t, c, history{
		old: func(vol string) {
			writeRemove(vpath(vol, 5, 0))
			// Older than the walk's margin by the last batch: only the
			// batches tell.
			time.Sleep(2500 * time.Millisecond)
			must(t, os.WriteFile(vpath(vol, 30, 0), []byte("last"), 0o644))
		},
		new: func(vol string) { writeRemove(vpath(vol, 7, 0)) },
	})
	c.RequireConverged()
	requireTargeted(t, c, old, 4, 100)
}

// TestRebootedDeposedPrimaryResyncsFully: the same, but the old primary's
// machine restarted (simulated: its journal's boot id changed) after it
// stopped uncleanly. Its page cache is gone: what its volume lost may be
// anywhere, also where no batch or ctime points (here: a file changed
// beneath the mount long before the kill), so only a full resync is sure.
func TestRebootedDeposedPrimaryResyncsFully(t *testing.T) {
	c := fstest.NewCluster(t, 1, seedFiles)
	c.WaitApplied(c.Barrier()) // the backup's first resync is over
	// Beneath the mount, past capture, and dated well before the last
	// batch: only a full resync finds it.
	must(t, os.WriteFile(fstest.Beneath(vpath(c.Vol, 30, 30)), []byte("lost with the page cache"), 0o644))
	h := touched(t)
	h.edit = func(st *journal.Store) { must(t, st.SetMeta(backup.BootKey, []byte("another-boot"))) }
	old := depose(t, c, h)
	c.RequireConverged()
	requireFull(t, c)
	if !strings.Contains(old.Out.String(), "machine restarted") {
		t.Fatalf("the old primary's log does not say why its resync is a full one:\n%s", old.Out)
	}
}

// TestUnjournaledTailIsResynced: the primary runs with a long seal
// interval and is killed with -9 after changes that never reached a
// sealed batch (on its volume, in no journal). The backup is promoted
// without them; the old primary's targeted resync finds them by their
// ctimes and undoes them.
func TestUnjournaledTailIsResynced(t *testing.T) {
	c := fstest.NewCluster(t, 1, seedFiles, "--seal-interval", "1h")
	// The walk takes in every ctime from 2 s before the last batch on:
	// the seeded files too, were they that fresh.
	time.Sleep(2500 * time.Millisecond)
	touch(t, c.Vol, 0, "both")
	c.WaitApplied(c.Barrier())
	// The open batch: never sealed.
	touch(t, c.Vol, 10, "tail")
	must(t, os.Link(vpath(c.Vol, 15, 5), filepath.Join(c.Vol, "d16", "tail-link")))
	must(t, os.Remove(vpath(c.Vol, 17, 7)))
	must(t, os.Mkdir(filepath.Join(c.Vol, "d18", "tail-dir"), 0o755))
	must(t, os.WriteFile(filepath.Join(c.Vol, "d18", "tail-dir", "x"), []byte("x"), 0o644))
	c.Primary.Kill()
	syscall.Unmount(c.Vol, syscall.MNT_DETACH)
	if _, err := os.Stat(filepath.Join(c.Vol, "d11", "tail")); err != nil {
		t.Fatalf("the tail is not on the old primary's volume: %v", err)
	}
	stopBackup(c.Backups[0])
	old := promote(t, c, touched(t).new)
	c.RequireConverged()
	requireTargeted(t, c, old, 75, 400)
	if !strings.Contains(old.Out.String(), "changed_after_last_batch") {
		t.Fatalf("the old primary's log does not count what it changed after its last batch:\n%s", old.Out)
	}
}

// TestWorkloadThroughFailovers: the randomized workload on a cluster of
// three nodes whose primary is killed with -9 under it, three times; each
// time the killed node rejoins with a targeted resync and every node ends
// equal to the new primary (allocation included).
func TestWorkloadThroughFailovers(t *testing.T) {
	c := startNodes(t, 1, 3)
	primary, _ := c.leader(60 * time.Second)
	// Enough files beside the workload's that what it touches is a small
	// share of the volume, and older than the walk's margin.
	for i := 0; i < 1500; i++ {
		dir := filepath.Join(primary.vol, fmt.Sprintf("bulk%02d", i/100))
		os.Mkdir(dir, 0o755)
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), fileData(i/100, i, 0), 0o644))
	}
	fstest.NewWorkload(primary.vol, false).Seed(primary.vol)
	c.converge(primary)
	time.Sleep(2500 * time.Millisecond)
	for round := 0; round < 3; round++ {
		w := fstest.NewWorkload(primary.vol, false)
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.Run(uint64(round+1), 3, 400, func() { barrierOn(primary) }, nil)
		}()
		time.Sleep(time.Duration(300+200*round) * time.Millisecond)
		c.kill(primary)
		<-done
		next, _ := c.leader(30 * time.Second)
		c.start(primary) // rejoins as a backup
		c.converge(next)
		out := primary.out.String()
		if !strings.Contains(grepLine(out, `msg="resync done"`), "kind=targeted") {
			t.Fatalf("round %d: %s did not rejoin with a targeted resync:\n%s", round, primary.name, out)
		}
		t.Logf("round %d: %s", round, grepLine(out, `msg="resync scope"`))
		primary = next
	}
}

// barrierOn takes a barrier on nd, if it still serves.
func barrierOn(nd *node) {
	cl, err := control.Dial(nd.jdir)
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cl.Barrier(ctx)
}

// grepLine is the first line of out that holds s.
func grepLine(out, s string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// TestDivergedBackupResyncsWhatItTouched: a backup that received batches
// the backup promoted (by force) never did is a backup, not a deposed
// primary: its targeted resync goes by what it applied and what its
// journal holds past it.
func TestDivergedBackupResyncsWhatItTouched(t *testing.T) {
	c := fstest.NewCluster(t, 2, seedFiles)
	touch(t, c.Vol, 0, "both")
	c.WaitApplied(c.Barrier())
	b1, b2 := c.Backups[0], c.Backups[1]
	fstest.Freeze(t, b1.Cmd.Process)
	touch(t, c.Vol, 10, "b2")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// b2 applied all of it: the chmod is touch's last op (waiting for
		// an earlier one let a loaded machine kill the primary before the
		// rename reached b2, and the resync then had little to list).
		if fi, err := os.Stat(vpath(b2.Vol, 14, 4)); err == nil && fi.Mode().Perm() == 0o600 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unfrozen backup never applied what only it received:\n%s", b2.Out)
		}
	}
	c.Primary.Kill()
	syscall.Unmount(c.Vol, syscall.MNT_DETACH)
	b1.Cmd.Process.Kill()
	b1.Cmd.Wait()
	fstest.DetachAll(b1.Vol)
	p := fstest.StartPromote(t, b1.Vol, b1.Jdir, "--force", "--backup", b2.Addr, "--token", fstest.TestToken)
	c.Primary, c.Vol, c.Jdir, c.Backups = p, b1.Vol, b1.Jdir, []*fstest.BackupProc{b2}
	touch(t, c.Vol, 20, "new")
	c.RequireConverged()
	requireTargeted(t, c, b2, 75, 400)
}
