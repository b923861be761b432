package coord

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/pbfs/pbfs/journal"
)

// TestForcedElection: an election that cannot prove its candidate holds
// every acknowledged batch (too few reports) elects nobody and publishes
// why; an operator's order for this vacancy makes the named node take the
// term anyway, once, and the order goes with the new term.
func TestForcedElection(t *testing.T) {
	c := newCandidate(t)
	ctx := context.Background()
	eps := c.n.cfg.Endpoints
	if w := c.elect(t); w != nil {
		t.Fatalf("elected at epoch %d on its own report, with the policy {1 of 2}", w.epoch)
	}
	c.elect(t) // publishes the first attempt's refusal with its report
	m := c.member(t, "a")
	if !strings.Contains(m.Refused, "only 1 backups reported") {
		t.Fatalf("the member record does not say why it refused: %+v", m)
	}

	// Orders that do not apply.
	if _, err := Force(ctx, eps, "default", "nobody"); !errors.Is(err, ErrNotEligible) {
		t.Fatalf("an order for a node with no record: %v", err)
	}
	for _, m := range []Member{
		{Name: "s", Volume: "vol-1", Epoch: 5, Fenced: 5, Stalled: true},
		{Name: "s", Volume: "vol-1", Epoch: 5, Fenced: 5, Stalled: true, FormerEpoch: 5}, // a deposed primary
		{Name: "s", Fenced: 5}, // never received the volume
	} {
		m.Role = "backup"
		_, err := c.cli.Put(ctx, c.n.k.member(m.Name), encode(m))
		must(t, err)
		if _, err := Force(ctx, eps, "default", "s"); !errors.Is(err, ErrNotEligible) {
			t.Fatalf("an order for %+v: %v", m, err)
		}
	}
	_, err := c.cli.Delete(ctx, c.n.k.member("s")) // its report would prove the candidate's
	must(t, err)
	c.putForce(t, Forced{Name: "a", Ended: 4}) // for an earlier vacancy
	if w := c.elect(t); w != nil {
		t.Fatal("took the term on an order for an earlier vacancy")
	}
	c.putForce(t, Forced{Name: "b", Ended: 5}) // for another node
	if w := c.elect(t); w != nil {
		t.Fatal("took the term on an order naming another node")
	}

	f, err := Force(ctx, eps, "default", "a")
	must(t, err)
	if f.Ended != 5 || !strings.Contains(f.Why, "only 1 backups reported") {
		t.Fatalf("order %+v", f)
	}
	w := c.elect(t)
	if w == nil || !w.forced || w.epoch != 6 {
		t.Fatalf("not elected on the order: %+v", w)
	}
	r, err := c.cli.Get(ctx, c.n.k.force())
	must(t, err)
	if len(r.Kvs) != 0 {
		t.Fatalf("the order outlived the term it was for: %s", r.Kvs[0].Value)
	}
	if _, err := Force(ctx, eps, "default", "a"); !errors.Is(err, ErrPrimaryServes) {
		t.Fatalf("an order while a primary serves: %v", err)
	}
}

func (c *candidate) member(t *testing.T, name string) Member {
	t.Helper()
	r, err := c.cli.Get(context.Background(), c.n.k.member(name))
	must(t, err)
	var m Member
	if len(r.Kvs) == 0 || json.Unmarshal(r.Kvs[0].Value, &m) != nil {
		t.Fatalf("no member record for %s", name)
	}
	return m
}

func (c *candidate) putForce(t *testing.T, f Forced) {
	t.Helper()
	_, err := c.cli.Put(context.Background(), c.n.k.force(), encode(f))
	must(t, err)
}

// TestForcedElectionDefersToAMoreCurrentMember: an order gives up what
// missing members may hold, never what a member that reports and could
// serve holds. And a node the rule elects anyway is not marked forced.
func TestForcedElectionDefersToAMoreCurrentMember(t *testing.T) {
	c := newCandidate(t)
	c.report(t, Member{Name: "b", Epoch: 5, Fenced: 5, Durable: 10})
	c.putForce(t, Forced{Name: "a", Ended: 5})
	if w := c.elect(t); w != nil {
		t.Fatalf("took epoch %d on the order although b holds more and could serve", w.epoch)
	}
	c.elect(t)
	if m := c.member(t, "a"); !strings.Contains(m.Refused, "order b instead") {
		t.Fatalf("refusal %q", m.Refused)
	}
	c.report(t, Member{Name: "b", Epoch: 5, Fenced: 5})
	if w := c.elect(t); w == nil || w.forced {
		t.Fatalf("elected by the rule, with an order standing: %+v", w)
	}
}

// TestForcedElectionRefusesAStalledNode: a node that stalled after the
// order was given does not take the term on it.
func TestForcedElectionRefusesAStalledNode(t *testing.T) {
	c := newCandidateWith(t, 5, 1, 2, func(st *journal.Store) { must(t, st.SetMetaUint("stalled", 1)) })
	c.putForce(t, Forced{Name: "a", Ended: 5})
	if w := c.elect(t); w != nil {
		t.Fatalf("a stalled node took epoch %d on an order", w.epoch)
	}
}

// TestForceRefusesAnotherVolume: a node serving another volume than the
// other members would resync them all to it.
func TestForceRefusesAnotherVolume(t *testing.T) {
	c := newCandidate(t)
	c.report(t, Member{Name: "b", Epoch: 5, Fenced: 5})
	_, err := c.cli.Put(context.Background(), c.n.k.member("x"), encode(Member{Name: "x", Role: "backup", Volume: "vol-2"}))
	must(t, err)
	if _, err := Force(context.Background(), c.n.cfg.Endpoints, "default", "x"); !errors.Is(err, ErrNotEligible) || !strings.Contains(err.Error(), "vol-2") {
		t.Fatalf("an order for a node of another volume: %v", err)
	}
}
