package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/coord"
)

// TestElectForcedAfterTwoLosses: two of three nodes are lost, so under
// the default majority policy the survivor cannot prove it holds every
// acknowledged write and is not elected; pbfs status says why. An
// operator's `pbfs elect --force` makes it take the term: it serves what
// it holds (here every acknowledged write, as it had caught up before the
// losses), the returning nodes are resynced from it, and status records
// the forced failover.
func TestElectForcedAfterTwoLosses(t *testing.T) {
	c := startNodes(t, 1, 3)
	primary, w := c.writeAndConverge(5)
	survivor, other := c.backupsOf(primary)
	c.kill(other)
	c.kill(primary)
	eps := c.etcd.Endpoints()
	var text string
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(text, survivor.name+" does not take over: only 1 backups reported"); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("status never said why the survivor is not elected:\n%s\n%s", text, c.logs())
		}
		text, _ = run(t, "status", "--coordinator", eps)
	}
	if l := c.leaderKey(); l != nil {
		t.Fatalf("%s was elected alone after two losses", l.Name)
	}

	if out, code := run(t, "elect", "--coordinator", eps, survivor.name); code != 2 || !strings.Contains(out, "--force") {
		t.Fatalf("elect without --force: exit %d: %s", code, out)
	}
	c.awaitRecordGone(other)
	if out, code := run(t, "elect", "--coordinator", eps, "--force", other.name); code != 1 || !strings.Contains(out, "no member") {
		t.Fatalf("elect of a lost node: exit %d: %s", code, out)
	}
	out, code := run(t, "elect", "--coordinator", eps, "--force", survivor.name)
	if code != 0 || !strings.Contains(out, "ordered "+survivor.name) || !strings.Contains(out, "only 1 backups reported") {
		t.Fatalf("elect --force: exit %d: %s", code, out)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(survivor.out.String(), "serving as the primary"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the survivor never took the term on the order:\n%s", c.logs())
		}
	}
	if !strings.Contains(survivor.out.String(), "taking over by the operator's order") {
		t.Fatalf("the survivor did not log the order:\n%s", survivor.out)
	}
	out, code = run(t, "elect", "--coordinator", eps, "--force", survivor.name)
	if code != 1 || !strings.Contains(out, "is the primary") {
		t.Fatalf("elect while a primary serves: exit %d: %s", code, out)
	}

	c.start(other)
	c.start(primary)
	for i := 0; !w.write(survivor, 100+i); i++ {
		if i > 20 {
			t.Fatalf("no write acknowledged after the others rejoined:\n%s", c.logs())
		}
	}
	c.converge(survivor)
	for _, nd := range c.nodes {
		w.requireLedger(t, nd.vol)
	}
	// Each member publishes its own record every few seconds: the old
	// primary's may still say "stalled" (status exits 3, degraded) for a
	// moment after the primary saw it resynced.
	var r coord.Report
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, code = run(t, "status", "--coordinator", eps, "--json")
		r = coord.Report{}
		if code == 0 && json.Unmarshal([]byte(out), &r) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status after the forced failover: exit %d: %s", code, out)
		}
	}
	if r.Failover == nil || !r.Failover.Forced || r.Failover.To != survivor.name || r.Forced != nil {
		t.Fatalf("status after the forced failover: %s", out)
	}
	if text, _ := run(t, "status", "--coordinator", eps); !strings.Contains(text, "by an operator's order") {
		t.Fatalf("status table after the forced failover:\n%s", text)
	}
}

// leaderKey reads the leader key, without waiting for a primary.
func (c *nodes) leaderKey() *coord.Leader {
	resp, err := c.cli.Get(context.Background(), "/pbfs/default/leader")
	if err != nil || len(resp.Kvs) == 0 {
		return nil
	}
	var l coord.Leader
	json.Unmarshal(resp.Kvs[0].Value, &l)
	return &l
}

// TestMemberDownForAWholeTermIsNotElected: with --ack all one backup's
// report proves it holds everything, but only for the terms it was in.
// n-y is down while the primary is lost and another node is elected;
// that term acknowledges writes with the old primary, rejoined; both are
// lost. y comes back alone and must not be elected on its old policy
// (before, it was, without that term's writes). Once the old primary,
// that term's backup, is back, it is elected and holds every
// acknowledged write.
func TestMemberDownForAWholeTermIsNotElected(t *testing.T) {
	c := startNodesWith(t, 1, 3, func(*node) []string { return []string{"--ack", "all"} })
	x, w := c.writeAndConverge(3)
	y, z := c.backupsOf(x)
	c.kill(y)
	c.awaitRecordGone(y)
	c.kill(x)
	// z is elected alone ({2 of 2}: its report proves all) and
	// acknowledges nothing until x, the old primary, rejoins.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(z.out.String(), "serving as the primary"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never took the term:\n%s", z.name, c.logs())
		}
	}
	c.start(x)
	for i := 0; !w.write(z, 100+i) || len(w.acked) < 8; i++ {
		if i > 100 {
			t.Fatalf("z's term acknowledged too few writes:\n%s", c.logs())
		}
	}
	c.kill(z)
	c.kill(x)
	c.awaitRecordGone(x)
	c.awaitRecordGone(z)

	c.start(y)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if l := c.leaderKey(); l != nil {
			t.Fatalf("%s was elected alone after a term it had no session in:\n%s", l.Name, y.out)
		}
	}
	if !strings.Contains(y.out.String(), "had no session in term") {
		t.Fatalf("y did not say why it is not elected:\n%s", y.out)
	}
	c.start(x) // z's backup: z itself comes back a deposed primary
	primary, _ := c.leader(60 * time.Second)
	w.requireLedger(t, primary.vol)
	c.start(z)
	c.converge(primary)
	for _, nd := range c.nodes {
		w.requireLedger(t, nd.vol)
	}
}

// writeAndConverge waits for a primary, has n writes acknowledged through
// it, and waits until every node holds them.
func (c *nodes) writeAndConverge(n int) (*node, *writer) {
	c.t.Helper()
	primary, _ := c.leader(60 * time.Second)
	w := &writer{acked: map[string]string{}, lastAck: map[string]time.Time{}}
	for i := 0; i < n; i++ {
		if !w.write(primary, i) {
			c.t.Fatalf("write %d not acknowledged:\n%s", i, c.logs())
		}
	}
	c.converge(primary)
	return primary, w
}

// backupsOf returns the two other nodes of a three-node cluster.
func (c *nodes) backupsOf(primary *node) (*node, *node) {
	var others []*node
	for _, nd := range c.nodes {
		if nd != primary {
			others = append(others, nd)
		}
	}
	return others[0], others[1]
}
