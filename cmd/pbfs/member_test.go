package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// A backup added and another removed while the service writes, without a
// restart: the newcomer ends identical to the primary, the removed one is
// told it can no longer be promoted alone, and once it is gone barriers
// under --ack all no longer wait for it.
func TestMemberAddRemoveOnline(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	old := c.Backups[0]
	nb := &fstest.BackupProc{Addr: fstest.FreeAddr(t), Vol: filepath.Join(c.Dir, "b-new"), Jdir: filepath.Join(c.Dir, "jb-new")}
	must(t, os.Mkdir(nb.Vol, 0o755))
	c.StartBackup(nb)

	c.Workload(1, 400, func() {
		out, code := run(t, "member", "add", "--journal", c.Jdir, nb.Addr)
		if code != 0 || !strings.Contains(out, "added "+nb.Addr) || !strings.Contains(out, "backups now: "+old.Addr+", "+nb.Addr) {
			t.Fatalf("member add: exit %d:\n%s", code, out)
		}
	})
	c.Backups = append(c.Backups, nb)
	c.RequireConverged()

	c.Workload(2, 400, func() {
		out, code := run(t, "member", "remove", "--journal", c.Jdir, old.Addr)
		if code != 0 || !strings.Contains(out, "removed "+old.Addr) || strings.Contains(out, "warning") || !strings.Contains(out, "backups now: "+nb.Addr+"\n") {
			t.Fatalf("member remove of a backup that is up: exit %d:\n%s", code, out)
		}
	})
	c.Backups = c.Backups[1:]
	old.Cmd.Process.Kill()
	old.Cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Primary.Client().Barrier(ctx); err != nil {
		t.Fatalf("a barrier after the removed backup died: %v", err)
	}
	c.RequireConverged()

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"member", "remove", "--journal", c.Jdir, old.Addr}, 1, "not a backup of this primary (its backups: " + nb.Addr + ")"},
		{[]string{"member", "add", "--journal", nb.Jdir, old.Addr}, 1, "this process is a backup"},
		{[]string{"member", "add", "--journal", c.Jdir}, 2, "give one HOST:PORT"},
		{[]string{"member", "remove", old.Addr}, 2, "give --journal JDIR"},
	} {
		if out, code := run(t, tc.args...); code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want %d and %q:\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}
}

// The old primary of a manual promotion comes back as a backup of the new
// one without restarting it: `pbfs backup` on its own journal and volume
// (the dead FUSE mount its kill left there is cleared), then `pbfs member
// add` on the new primary. Every acknowledged write ends on all three.
func TestOldPrimaryRejoinsOnline(t *testing.T) {
	c := fstest.NewCluster(t, 2, nil)
	acked := ledger(t, c, "before", 10)
	c.Primary.Kill() // its mount is left dead on c.Vol
	winner, other := mostCurrent(t, c)
	stopBackup(winner)
	p := fstest.StartPromote(t, winner.Vol, winner.Jdir, "--peer", other.Addr, "--backup", other.Addr, "--token", fstest.TestToken)
	requireLedger(t, winner.Vol, acked)
	old := &fstest.BackupProc{Addr: fstest.FreeAddr(t), Vol: c.Vol, Jdir: c.Jdir}
	c.StartBackup(old)
	if out, code := run(t, "member", "add", "--journal", winner.Jdir, old.Addr); code != 0 {
		t.Fatalf("member add of the old primary: exit %d:\n%s", code, out)
	}
	c.Primary, c.Vol, c.Jdir = p, winner.Vol, winner.Jdir
	c.Backups = []*fstest.BackupProc{other, old}
	acked = append(acked, ledger(t, c, "after", 5)...)
	c.RequireConverged()
	for _, b := range c.Backups {
		requireLedger(t, b.Vol, acked)
	}
	// Everything the old primary journaled reached the new one (--ack
	// all): nothing is kept aside, and nothing is warned about.
	if bundles, _ := filepath.Glob(filepath.Join(old.Jdir, "discarded-*")); len(bundles) > 0 || strings.Contains(old.Out.String(), "kept for inspection") {
		t.Fatalf("the rejoined old primary kept batches the new primary holds: %v\n%s", bundles, old.Out)
	}
}
