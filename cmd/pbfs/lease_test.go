package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pbfs/pbfs/internal/fstest"
)

// TestPrimaryRidesOutACoordinatorOutage: etcd (one member) is down past
// the primary's deadline, but back before the give-up time. A write whose
// barrier was asked while the lease was in doubt is acknowledged once a
// renewal is accepted, and the primary is not deposed: etcd had not
// expired its lease, so nobody else could have been elected. Before, the
// primary deposed itself at its deadline, and every pause of etcd's
// longer than that became a failover.
func TestPrimaryRidesOutACoordinatorOutage(t *testing.T) {
	c := startNodesWith(t, 1, 2, func(*node) []string { return []string{"--lease-ttl", "6s"} })
	primary, _ := c.leader(60 * time.Second)
	w := &writer{acked: map[string]string{}, lastAck: map[string]time.Time{}}
	for i := 0; i < 3; i++ {
		if !w.write(primary, i) {
			t.Fatalf("write %d not acknowledged:\n%s", i, c.logs())
		}
	}
	c.etcd.Kill(0)
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(primary.out.String(), "lease in doubt"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the lease never went in doubt with etcd down:\n%s", primary.out)
		}
	}
	acked := make(chan bool, 1)
	go func() { acked <- w.write(primary, 10) }()
	time.Sleep(200 * time.Millisecond)
	c.etcd.Restart(0)
	if !<-acked {
		t.Fatalf("the write asked while the lease was in doubt was not acknowledged once etcd was back:\n%s", primary.out)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(primary.out.String(), "lease renewed"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no renewal logged:\n%s", primary.out)
		}
	}
	if strings.Contains(primary.out.String(), "deposed") {
		t.Fatalf("the primary was deposed by a pause of etcd's:\n%s", primary.out)
	}
	if !w.write(primary, 11) {
		t.Fatalf("the primary does not acknowledge after the outage:\n%s", primary.out)
	}
	w.requireLedger(t, primary.vol)
}

// TestFailoverWithAHungEtcdMember: one etcd member of three hangs (frozen,
// as a stalled disk or a paused VM would leave it) while etcd keeps its
// quorum, and the primary is killed. A backup takes over while the member
// still hangs: every etcd request of the election is bounded and retried
// on the next member. Before, a request that landed on the hung member
// waited for it, and no node took over until it came back.
func TestFailoverWithAHungEtcdMember(t *testing.T) {
	c := startNodes(t, 3, 3)
	primary, _ := c.leader(60 * time.Second)
	w := &writer{acked: map[string]string{}, lastAck: map[string]time.Time{}}
	for i := 0; i < 5; i++ {
		w.write(primary, i)
	}
	hung := (c.etcd.Leader(c.cli) + 1) % 3 // a follower: etcd keeps its leader
	fstest.Freeze(t, c.etcd.Process(hung))
	defer fstest.Thaw(c.etcd.Process(hung))
	c.kill(primary)
	next, _ := c.leader(30 * time.Second)
	if next == primary {
		t.Fatal("the killed primary is still the leader")
	}
	for i := 0; !w.write(next, 100+i); i++ {
		if i > 100 {
			t.Fatalf("the new primary does not acknowledge with an etcd member hung:\n%s", c.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.requireLedger(t, next.vol)
}

// TestRevokedLeaseFencesTheOldPrimary: etcd revokes the primary's lease
// while the primary cannot hear it (its link to etcd cut), as a paused
// etcd leader that resumes does with stale expiry times. The primary's
// clock says it holds the lease for seconds more, but the backups saw the
// leader key go and fenced themselves: they refuse it, so its barriers
// fail at once, and every write a barrier acknowledged, on either side of
// the change, is on the new primary. Before, the old primary acknowledged
// until its own deadline, through a backup the new term had not reached
// yet, and those writes were lost.
func TestRevokedLeaseFencesTheOldPrimary(t *testing.T) {
	c := startRelayedNodes(t, 1, 3, func(*node) []string { return []string{"--lease-ttl", "9s"} })
	old, l := c.leader(60 * time.Second)
	w := &writer{acked: map[string]string{}, lastAck: map[string]time.Time{}}
	for i := 0; i < 5; i++ {
		if !w.write(old, i) {
			t.Fatalf("write %d not acknowledged:\n%s", i, c.logs())
		}
	}
	old.cutCoordinator(true)
	defer old.cutCoordinator(false) // to stop it cleanly
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := c.cli.Revoke(ctx, clientv3.LeaseID(l.LeaseID))
	cancel()
	must(t, err)
	revoked := time.Now()
	// The old primary's lease runs, by its clock, for about 8 s from its
	// last renewal: write through it for 5 s.
	var lastAck time.Time
	for i := 100; time.Since(revoked) < 5*time.Second; i++ {
		if w.write(old, i) {
			lastAck = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	if after := lastAck.Sub(revoked); after > 2*time.Second {
		t.Fatalf("the old primary acknowledged a write %v after etcd revoked its lease:\n%s", after.Round(time.Millisecond), c.logs())
	}
	// Refused, it stops its service at once (the demotion hook ran), not
	// at its lease's give-up time, 13.5 s after its last renewal.
	if _, err := os.Stat(filepath.Join(old.hooks, "demote")); err != nil {
		t.Fatalf("the old primary did not step down within 5 s of being refused:\n%s", old.out)
	}
	next, _ := c.leader(30 * time.Second)
	if next == old {
		t.Fatal("the old primary is the leader again")
	}
	for i := 0; i < 5; i++ {
		if !w.write(next, 200+i) {
			t.Fatalf("write %d not acknowledged by the new primary:\n%s", i, c.logs())
		}
	}
	w.requireLedger(t, next.vol)
	if !strings.Contains(old.out.String(), "deposed") {
		t.Fatalf("the old primary never learned it was deposed:\n%s", old.out)
	}
}
