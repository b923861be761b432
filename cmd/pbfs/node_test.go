package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/health"
)

// TestAutomaticFailover: three nodes on etcd; the primary is killed with
// -9 in the middle of a write load, five times in a row. Each time a
// backup takes over by itself (its promotion hook runs), every
// acknowledged write is on the new primary, the killed node rejoins as a
// backup, and all three end byte-identical. The time from the kill to the
// first write the new primary acknowledges is reported.
func TestAutomaticFailover(t *testing.T) {
	admins := map[string]string{}
	c := startNodesWith(t, 1, 3, func(nd *node) []string {
		admins[nd.name] = fstest.FreeAddr(t)
		return []string{"--admin", admins[nd.name]}
	})
	w := &writer{acked: map[string]string{}, lastAck: map[string]time.Time{}}
	var took []time.Duration
	for round := 0; round < 5; round++ {
		primary, _ := c.leader(60 * time.Second)
		for i := 0; i < 20; i++ {
			w.write(primary, round*1000+i)
		}
		killed := time.Now()
		c.kill(primary)
		next, l := c.leader(30 * time.Second)
		for i := 0; !w.write(next, round*1000+500+i); i++ {
			if time.Since(killed) > 30*time.Second {
				t.Fatalf("the new primary %s acknowledges nothing", next.name)
			}
		}
		took = append(took, time.Since(killed))
		if l.Epoch < uint64(round+2) {
			t.Fatalf("round %d: the new term's epoch is %d", round, l.Epoch)
		}
		w.requireLedger(t, next.vol)
		// The hook runs once the mount serves, so a write may be
		// acknowledged before it has.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			data, _ := os.ReadFile(filepath.Join(next.hooks, "promote"))
			if strings.Contains(string(data), "promoted "+next.name) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the promotion hook did not run on %s: %q", next.name, data)
			}
		}
		if round == 0 {
			c.requireLost(primary)
			if r := readyz(t, admins[next.name], 200, "the new primary"); r.Role != health.RolePrimary {
				t.Fatalf("the new primary's /readyz: %+v", r)
			}
			// Its events, kept across its roles: a backup, then the primary.
			ew := watchEvents(t, "--admin", admins[next.name])
			ew.await(t, events.KindRole, "role", "backup")
			ew.await(t, events.KindFenced, "", nil)
			ew.await(t, events.KindRole, "role", "primary")
		}
		c.start(primary) // the killed node rejoins as a backup
		c.converge(next)
		if round == 0 {
			if r := readyz(t, admins[primary.name], 200, "the old primary, rejoined"); r.Role != health.RoleBackup {
				t.Fatalf("the rejoined node's /readyz: %+v", r)
			}
			// The coordinator decides a node's members (an election relies
			// on the term's record of them): the control socket refuses.
			if out, code := run(t, "member", "add", "--journal", next.jdir, "127.0.0.1:1"); code == 0 || !strings.Contains(out, "pbfs node's") {
				t.Fatalf("pbfs member add on a node's primary: exit %d:\n%s", code, out)
			}
			// A node serving as a backup answers its control socket
			// (pbfs status, pbfs journal), as pbfs backup does.
			cl, err := control.Dial(primary.jdir)
			if err != nil {
				t.Fatal(err)
			}
			st, err := cl.Status(context.Background())
			cl.Close()
			if err != nil || st.Role != "backup" || st.Backup == nil || st.Backup.AppliedSeq == 0 {
				t.Fatalf("the rejoined node's control socket: %+v, %v", st, err)
			}
		}
		c.requireStatus(next, primary)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("kill -9 of the primary to the first write the new one acknowledged: min %v, median %v, max %v (%v)",
		took[0].Round(time.Millisecond), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), took)
	if took[len(took)/2] > 10*time.Second {
		t.Fatalf("failover takes %v (median): too slow", took[len(took)/2])
	}
}

// TestPartitionedPrimaryNeverAcknowledges: the primary is frozen
// (SIGSTOP) while its clients keep asking it for barriers; a backup takes
// over once the lease lapses. When the old primary thaws, no barrier it
// returns succeeds: it may have been deposed. It rejoins as a backup and
// converges.
func TestPartitionedPrimaryNeverAcknowledges(t *testing.T) {
	c := startNodes(t, 1, 3)
	old, _ := c.leader(60 * time.Second)
	w := &writer{acked: map[string]string{}, lastAck: map[string]time.Time{}}
	for i := 0; i < 10; i++ {
		w.write(old, i)
	}
	fstest.Freeze(t, old.cmd.Process)
	stopped := time.Now()
	// Clients keep writing to the frozen primary.
	results := make(chan time.Time, 100)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if w.write(old, 100+i) {
				results <- time.Now()
			}
		}(i)
	}
	next, _ := c.leader(30 * time.Second)
	if next == old {
		t.Fatal("the frozen primary is still the leader")
	}
	w.write(next, 200)
	fstest.Thaw(old.cmd.Process)
	wg.Wait()
	close(results)
	for at := range results {
		t.Fatalf("the frozen primary acknowledged a write %v after it was stopped", at.Sub(stopped))
	}
	w.requireLedger(t, next.vol)
	// It finds out, stops serving, and rejoins as a backup.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(old.out.String(), "deposed"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the old primary never noticed it was deposed:\n%s", old.out)
		}
	}
	c.converge(next)
}

// TestCoordinatorLoss: with three etcd members, losing one changes
// nothing, even etcd's leader (renewals pause while etcd elects another,
// and on a loaded machine past the primary's deadline: its barriers wait
// for the next renewal instead of failing); losing all makes the primary stop acknowledging within its
// lease (it cannot prove it still holds the term); once etcd is back, a
// primary serves again and nothing acknowledged was lost.
func TestCoordinatorLoss(t *testing.T) {
	c := startNodes(t, 3, 2)
	primary, _ := c.leader(60 * time.Second)
	w := &writer{acked: map[string]string{}, lastAck: map[string]time.Time{}}
	for i := 0; i < 5; i++ {
		w.write(primary, i)
	}
	leader := c.etcd.Leader(c.cli)
	c.etcd.Kill(leader)
	time.Sleep(3 * time.Second)
	if !w.write(primary, 10) {
		t.Fatalf("the primary stopped acknowledging with two of three etcd members up:\n%s", primary.out)
	}
	if strings.Contains(primary.out.String(), "deposed") {
		t.Fatalf("the primary was deposed when etcd lost its leader:\n%s", primary.out)
	}
	for i := 0; i < 3; i++ {
		c.etcd.Kill(i)
	}
	lost := time.Now()
	var lastOK time.Time
	for time.Since(lost) < 6*time.Second {
		if w.write(primary, 20+int(time.Since(lost)/time.Millisecond)) {
			lastOK = time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !lastOK.IsZero() && lastOK.Sub(lost) > 3*time.Second {
		t.Fatalf("the primary acknowledged %v after etcd was lost, past its 3 s lease", lastOK.Sub(lost))
	}
	c.etcd.Restart(0, 1, 2)
	back := time.Now()
	next, _ := c.leader(60 * time.Second)
	t.Logf("a primary served %v after etcd was back", time.Since(back).Round(time.Millisecond))
	for i := 0; !w.write(next, 5000+i); i++ {
		if i > 100 {
			t.Fatal("no primary acknowledges after etcd came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.requireLedger(t, next.vol)
}

// TestLoneSurvivorAcknowledgesNothing: a backup and then the primary are
// killed; the remaining node takes the term, but with no other member up
// it acknowledges nothing (--min-backups defaults to 1 for a node): had it
// acknowledged on its own disk, and been lost in turn, the killed backup,
// back first, would have been elected without those writes. Once a member
// is back and has caught up, writes are acknowledged again, and held by
// it.
func TestLoneSurvivorAcknowledgesNothing(t *testing.T) {
	// With a majority (the default), a lone survivor of two losses is not
	// even elected.
	c := startNodesWith(t, 1, 3, func(*node) []string { return []string{"--ack", "all"} })
	primary, _ := c.leader(60 * time.Second)
	w := &writer{acked: map[string]string{}, lastAck: map[string]time.Time{}}
	for i := 0; i < 5; i++ {
		w.write(primary, i)
	}
	var survivor, other *node
	for _, nd := range c.nodes {
		if nd != primary && survivor == nil {
			survivor = nd
		} else if nd != primary {
			other = nd
		}
	}
	c.kill(other)
	// Its member record goes with its lease: the survivor is promoted
	// knowing of no other member.
	c.awaitRecordGone(other)
	c.kill(primary)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(survivor.out.String(), "serving as the primary"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the survivor never took the term:\n%s", c.logs())
		}
	}
	for i := 0; i < 3; i++ {
		if w.write(survivor, 100+i) {
			t.Fatalf("the lone survivor acknowledged a write on its own disk:\n%s", survivor.out)
		}
	}
	if out, _ := run(t, "status", "--journal", survivor.jdir); !strings.Contains(out, "barriers wait until more backups join") {
		t.Fatalf("pbfs status on the lone survivor does not say its barriers wait:\n%s", out)
	}
	if !strings.Contains(survivor.out.String(), "too few other members are up") {
		t.Fatalf("the survivor did not say why its barriers wait:\n%s", survivor.out)
	}
	c.start(other)
	for i := 0; !w.write(survivor, 200+i); i++ {
		if i > 20 {
			t.Fatalf("no write acknowledged after %s rejoined:\n%s", other.name, c.logs())
		}
	}
	c.start(primary)
	c.converge(survivor)
	w.requireLedger(t, other.vol)
}

// TestNodesAdoptAMountsVolume: a volume served by a plain pbfs mount is
// taken over by pbfs node without losing it: in the coordinator's first
// term the node whose journal a mount left is the volume's copy (not a
// deposed primary), it wins the first election over an empty node, and
// the empty one is resynced from it.
func TestNodesAdoptAMountsVolume(t *testing.T) {
	fstest.RequireFUSE(t)
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	must(t, os.Mkdir(vol, 0o755))
	p := startMount(t, nil, vol, jdir)
	must(t, os.WriteFile(filepath.Join(vol, "precious"), []byte("written under pbfs mount"), 0o644))
	p.Barrier()
	p.Stop()
	var adopt *node
	c := startNodesWith(t, 1, 2, func(nd *node) []string {
		if nd.name == "n1" { // n0 sorts first: without the rule, it would win
			nd.vol, nd.jdir, adopt = vol, jdir, nd
		}
		return nil
	})
	primary, _ := c.leader(60 * time.Second)
	if primary != adopt {
		t.Fatalf("%s took the first term over the node holding the mount's volume:\n%s", primary.name, c.logs())
	}
	if data, err := os.ReadFile(filepath.Join(vol, "precious")); err != nil || string(data) != "written under pbfs mount" {
		t.Fatalf("the mount's volume lost its data: %q %v", data, err)
	}
	c.converge(primary)
}

// TestNodeCPUsFollowTheRole: with --cpus, a node runs on those CPUs only
// while it is a backup: the primary runs where it was started, the
// backups pinned; after a failover the new primary is unpinned and the
// old one, restarted as a backup, pinned; and a primary deposed while
// frozen serves on as a backup, pinned again in the same process.
func TestNodeCPUsFollowTheRole(t *testing.T) {
	mine, cpu := pinnableCPU(t)
	c := startNodesWith(t, 1, 3, func(*node) []string { return []string{"--cpus", cpu} })
	// requireCPUs waits until every thread of nd runs on want.
	requireCPUs := func(nd *node, want, role string) {
		t.Helper()
		var wrong []string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			wrong = wrong[:0]
			for tid, list := range cpusOf(t, nd.cmd.Process.Pid) {
				if list != want {
					wrong = append(wrong, fmt.Sprintf("thread %s on %s", tid, list))
				}
			}
			if len(wrong) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(wrong) > 0 {
			t.Fatalf("%s %s: want every thread on CPUs %s: %v", role, nd.name, want, wrong)
		}
	}
	requireRoles := func(primary *node) {
		t.Helper()
		for _, nd := range c.nodes {
			if nd == primary {
				requireCPUs(nd, mine, "primary")
			} else {
				requireCPUs(nd, cpu, "backup")
			}
		}
	}
	primary, _ := c.leader(60 * time.Second)
	c.converge(primary)
	requireRoles(primary)
	c.kill(primary)
	next, _ := c.leader(30 * time.Second)
	c.start(primary) // back as a backup, a new process
	c.converge(next)
	requireRoles(next)
	// The same process going from primary to backup: frozen past its
	// lease, it finds itself deposed when it thaws and serves as a
	// backup, pinned again.
	fstest.Freeze(t, next.cmd.Process)
	third, _ := c.leader(30 * time.Second)
	fstest.Thaw(next.cmd.Process)
	c.converge(third)
	requireRoles(third)
}

// TestNodeSaysCoordinatorUnreachable: a node whose etcd does not answer
// says so in its log, rather than wait in silence.
func TestNodeSaysCoordinatorUnreachable(t *testing.T) {
	fstest.RequireFUSE(t)
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	must(t, os.Mkdir(vol, 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pbfsBin, "node", "--coordinator", "etcd://127.0.0.1:1", "--name", "a", "--listen", "127.0.0.1:0",
		"--advertise", "127.0.0.1:9", "--token", "t", "--journal", filepath.Join(dir, "j"), vol)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "coordinator unreachable") {
		t.Fatalf("no word of the unreachable coordinator in 12 s:\n%s", out)
	}
}
