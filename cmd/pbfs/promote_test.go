package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/wire"
)

// ledger writes n files, each covered by a barrier, and returns their
// names: writes a client saw acknowledged.
func ledger(t *testing.T, c *fstest.Cluster, prefix string, n int) []string {
	t.Helper()
	var acked []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%03d", prefix, i)
		must(t, os.WriteFile(filepath.Join(c.Vol, name), []byte("acknowledged "+name), 0o644))
		c.Barrier()
		acked = append(acked, name)
	}
	return acked
}

func requireLedger(t *testing.T, vol string, acked []string) {
	t.Helper()
	for _, name := range acked {
		if data, err := os.ReadFile(filepath.Join(vol, name)); err != nil || string(data) != "acknowledged "+name {
			t.Fatalf("acknowledged write %s lost: %q %v", name, data, err)
		}
	}
}

func stopBackup(b *fstest.BackupProc) {
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
}

// TestPromoteTakesOver: the primary dies (kill -9) after acknowledged
// writes; the most current backup is promoted by hand: its volume holds
// every acknowledged write, it serves barriers under a higher epoch, the
// other backup follows it, and the old primary, restarted as a backup,
// is resynced (its unacknowledged suffix kept aside, readable) and ends
// equal to the new primary.
func TestPromoteTakesOver(t *testing.T) {
	c := fstest.NewCluster(t, 2, nil)
	acked := ledger(t, c, "before", 10)
	c.Primary.Kill()
	syscall.Unmount(c.Vol, syscall.MNT_DETACH)
	// Promoting the crashed primary's own journal by mistake is refused,
	// and leaves it a primary's (the journal needs the recovery a
	// read-write open makes first).
	if out, code := run(t, "promote", "--journal", c.Jdir, "--token", fstest.TestToken, "--force", c.Vol); code != 1 || !strings.Contains(out, "not a backup") || strings.Contains(out, "promote: promote:") {
		t.Fatalf("promoting the crashed primary's journal: exit %d:\n%s", code, out)
	}
	pst, err := journal.OpenStore(c.Jdir, journal.StoreOptions{})
	must(t, err)
	role, _ := pst.Meta(journal.KeyRole.Name)
	stalled, _ := pst.MetaUint("stalled")
	must(t, pst.Close())
	if string(role) != journal.RolePrimary || stalled != 0 {
		t.Fatalf("a refused promotion changed the crashed primary's journal: role %q, stalled %d", role, stalled)
	}
	winner, other := mostCurrent(t, c)
	stopBackup(winner)
	// The old primary rejoins as a backup on its own journal and volume.
	old := &fstest.BackupProc{Addr: fstest.FreeAddr(t), Vol: c.Vol, Jdir: c.Jdir}
	c.StartBackup(old)
	p := fstest.StartPromote(t, winner.Vol, winner.Jdir, "--peer", other.Addr, "--backup", other.Addr, "--backup", old.Addr, "--token", fstest.TestToken)
	requireLedger(t, winner.Vol, acked)
	c.Primary, c.Vol, c.Jdir = p, winner.Vol, winner.Jdir
	c.Backups = []*fstest.BackupProc{other, old}
	acked = append(acked, ledger(t, c, "after", 5)...)
	c.RequireConverged()
	for _, b := range c.Backups {
		requireLedger(t, b.Vol, acked)
	}
	st, err := p.Client().Status(t.Context())
	must(t, err)
	if st.Epoch < 2 {
		t.Fatalf("the promoted primary serves epoch %d, want a new term", st.Epoch)
	}
	bundles, _ := filepath.Glob(filepath.Join(old.Jdir, "discarded-*"))
	for _, dir := range bundles {
		if out, code := run(t, "journal", "ls", "--journal", dir); code != 0 {
			t.Fatalf("the kept-aside batches are not readable: %s", out)
		}
	}
	// Resynced, the old primary's volume is the new primary's snapshot:
	// its journal no longer says a mount of it stopped uncleanly, or
	// that its volume is ahead. Left so, promoting it later resynced
	// every backup first, and failed its first barriers "after a crash".
	stopBackup(old)
	ost, err := journal.OpenStore(old.Jdir, journal.StoreOptions{})
	must(t, err)
	unclean, _, err := ost.MarkOpen()
	ahead, _ := ost.MetaUint(journal.KeyAhead.Name)
	must(t, errors.Join(err, ost.Close()))
	if unclean || ahead != 0 {
		t.Fatalf("the resynced old primary's journal: unclean %v, ahead of seq %d", unclean, ahead)
	}
}

// TestPromoteRefusals: a stalled backup, a backup behind a reachable one,
// and a backup that cannot prove it holds every acknowledged batch are
// refused, naming why; the most current one is accepted; --force
// promotes anyway and the journal records it.
func TestPromoteRefusals(t *testing.T) {
	c := fstest.NewCluster(t, 2, nil, "--ack", "1") // a barrier needs one of the two
	ledger(t, c, "both", 3)
	c.WaitApplied(c.Barrier())
	b0, b1 := c.Backups[0], c.Backups[1]
	stopBackup(b0)
	ledger(t, c, "only-b1", 3) // b0 misses these
	c.Primary.Stop()
	promote := func(b *fstest.BackupProc, args ...string) (string, int) {
		return run(t, append(append([]string{"promote", "--journal", b.Jdir, "--token", fstest.TestToken}, args...), b.Vol)...)
	}
	// Behind a reachable peer.
	out, code := promote(b0, "--peer", b1.Addr)
	if code != 1 || !strings.Contains(out, "behind backup "+b1.Addr) {
		t.Fatalf("promoting the backup that is behind: exit %d:\n%s", code, out)
	}
	// Cannot prove: with one of two backups in the ack set, the other must
	// answer, and it is down.
	stopBackup(b1)
	out, code = promote(b0, "--peer", b1.Addr)
	if code != 1 || !strings.Contains(out, "must answer") {
		t.Fatalf("promoting with the peer down: exit %d:\n%s", code, out)
	}
	// Stalled.
	st, err := journal.OpenStore(b1.Jdir, journal.StoreOptions{})
	must(t, err)
	must(t, st.SetMetaUint("stalled", 1))
	must(t, st.Close())
	c.StartBackup(b0)
	out, code = promote(b1, "--peer", b0.Addr)
	if code != 1 || !strings.Contains(out, "stalled") {
		t.Fatalf("promoting a stalled backup: exit %d:\n%s", code, out)
	}
	st, err = journal.OpenStore(b1.Jdir, journal.StoreOptions{})
	must(t, err)
	must(t, st.SetMetaUint("stalled", 0))
	must(t, st.Close())
	// The most current one, its peer reachable: accepted.
	p := fstest.StartPromote(t, b1.Vol, b1.Jdir, "--peer", b0.Addr, "--backup", b0.Addr, "--token", fstest.TestToken)
	for _, name := range []string{"only-b1-000", "only-b1-002"} {
		if _, err := os.Stat(filepath.Join(b1.Vol, name)); err != nil {
			t.Fatalf("the promoted backup lacks %s: %v", name, err)
		}
	}
	p.Stop()
	stopBackup(b0)
	// --force promotes a backup that cannot be promoted safely (stalled,
	// here), loudly, and its journal says so.
	st, err = journal.OpenStore(b0.Jdir, journal.StoreOptions{})
	must(t, err)
	must(t, st.SetMetaUint("stalled", 1))
	must(t, st.Close())
	if out, code := promote(b0); code != 1 || !strings.Contains(out, "stalled") {
		t.Fatalf("promoting a stalled backup without --force: exit %d:\n%s", code, out)
	}
	p = fstest.StartPromote(t, b0.Vol, b0.Jdir, "--token", fstest.TestToken, "--force")
	if !strings.Contains(p.Out.String(), "PROMOTING BY FORCE") {
		t.Fatalf("a forced promotion without a loud warning:\n%s", p.Out)
	}
	p.Stop()
	st, err = journal.OpenStore(b0.Jdir, journal.StoreOptions{ReadOnly: true})
	must(t, err)
	rec, err := st.Meta("promoted")
	st.Close()
	must(t, err)
	var promoted struct {
		Forced  bool     `json:"forced"`
		Reasons []string `json:"reasons"`
	}
	if json.Unmarshal(rec, &promoted) != nil || !promoted.Forced || len(promoted.Reasons) == 0 {
		t.Fatalf("the journal does not record the forced promotion: %s", rec)
	}
	// b0 has served as the primary since: promoting it again is a mistake
	// (pbfs mount serves it), refused before the journal is touched.
	st, err = journal.OpenStore(b0.Jdir, journal.StoreOptions{ReadOnly: true})
	must(t, err)
	stalledBefore, _ := st.MetaUint("stalled")
	st.Close()
	for _, force := range [][]string{nil, {"--force"}} {
		out, code := promote(b0, force...)
		if code != 1 || !strings.Contains(out, "last served a primary (pbfs mount), not a backup") {
			t.Fatalf("promoting a primary's journal %v: exit %d:\n%s", force, code, out)
		}
		if strings.Contains(out, "--force overrides") { // it does not
			t.Fatalf("promoting a primary's journal %v offers --force:\n%s", force, out)
		}
	}
	st, err = journal.OpenStore(b0.Jdir, journal.StoreOptions{ReadOnly: true})
	must(t, err)
	role, _ := st.Meta(journal.KeyRole.Name)
	stalled, _ := st.MetaUint("stalled")
	st.Close()
	if string(role) != journal.RolePrimary || stalled != stalledBefore {
		t.Fatalf("a refused promotion changed the primary's journal: role %q, stalled %d (was %d)", role, stalled, stalledBefore)
	}
}

// mostCurrent returns the more current of c's two backups, and the other:
// which one is is up to the kill of the primary, so both are asked.
func mostCurrent(t *testing.T, c *fstest.Cluster) (winner, other *fstest.BackupProc) {
	t.Helper()
	p0, err0 := backup.Query(t.Context(), c.Backups[0].Addr, fstest.TestToken, wire.TLSFiles{})
	p1, err1 := backup.Query(t.Context(), c.Backups[1].Addr, fstest.TestToken, wire.TLSFiles{})
	must(t, errors.Join(err0, err1))
	if p1.DurableSeq > p0.DurableSeq {
		return c.Backups[1], c.Backups[0]
	}
	return c.Backups[0], c.Backups[1]
}
