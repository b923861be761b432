package coord

import (
	"context"
	"strings"
	"testing"
)

// TestElectionSkipsAMemberThatMissedATerm: with --ack all ({2 of 2}), one
// report proves everything, but only for the terms it was told the
// policy in. Member a was down for the whole of term 5, whose primary
// started with nobody and acknowledged with a member that joined it;
// both are lost. a must not be elected alone on its term-3 policy. Had a
// been a member term 5 started with, that primary's barriers would have
// waited for it: the term acknowledged nothing, and a may be elected.
func TestElectionSkipsAMemberThatMissedATerm(t *testing.T) {
	c := newCandidateWith(t, 3, 2, 2)
	c.term(t, Term{Epoch: 5, Primary: "z", Starting: []string{}})
	if w := c.elect(t); w != nil {
		t.Fatalf("elected at epoch %d on a policy of term 3, after term 5 it had no session in", w.epoch)
	}
	c.elect(t)
	if m := c.member(t, "a"); !strings.Contains(m.Refused, "no session in term 5") {
		t.Fatalf("refusal %q", m.Refused)
	}
	// A member term 5 started with that reports no volume (its journal
	// wiped since) proves nothing.
	c.term(t, Term{Epoch: 5, Primary: "z", Starting: []string{"b"}})
	_, err := c.cli.Put(context.Background(), c.n.k.member("b"), encode(Member{Name: "b", Role: "backup", Fenced: 5}))
	must(t, err)
	if w := c.elect(t); w != nil {
		t.Fatal("elected on a wiped member's word that term 5 acknowledged nothing")
	}
	c.term(t, Term{Epoch: 5, Primary: "z", Starting: []string{"a"}})
	if w := c.elect(t); w == nil {
		t.Fatal("not elected, though term 5 waited for it and acknowledged nothing")
	}
}

// TestElectionAfterATermNobodyJoined: a primary that started with nobody,
// could acknowledge nothing without a backup (--min-backups 1) and
// recorded each member before it added it, died before any joined: its
// term acknowledged nothing, and a backup of the term before is elected.
// (Without the record's list, nobody could be, short of pbfs elect
// --force.)
func TestElectionAfterATermNobodyJoined(t *testing.T) {
	c := newCandidateWith(t, 3, 2, 2)
	c.term(t, Term{Epoch: 5, Primary: "z", Starting: []string{}, Listed: true})
	if w := c.elect(t); w == nil {
		t.Fatalf("not elected, though term 5 streamed to nobody: %s", c.member(t, "a").Refused)
	}
}

// TestElectionAfterATermAMemberJoined: the record names a member that
// joined the term; only its report that it had no session in the term
// proves the term acknowledged nothing.
func TestElectionAfterATermAMemberJoined(t *testing.T) {
	c := newCandidateWith(t, 3, 2, 2)
	c.term(t, Term{Epoch: 5, Primary: "z", Starting: []string{}, Listed: true, Joined: []string{"b"}})
	if w := c.elect(t); w != nil {
		t.Fatal("elected though b, which joined term 5, has not reported")
	}
	c.report(t, Member{Name: "b", Epoch: 5, Fenced: 5})
	if w := c.elect(t); w != nil {
		t.Fatal("elected on a term-3 policy though b had a session in term 5")
	}
	c.report(t, Member{Name: "b", Epoch: 3, Fenced: 5})
	if w := c.elect(t); w == nil {
		t.Fatalf("not elected, though the one member term 5 added had no session in it: %s", c.member(t, "a").Refused)
	}
}

// TestElectionCountsOnlyReportsOfTheTerm: a report counts toward the
// quorum only if no term that may have acknowledged writes lies between
// its Epoch and the ended term; a term no record names never served.
func TestElectionCountsOnlyReportsOfTheTerm(t *testing.T) {
	c := newCandidate(t) // epoch 5, {1 of 2}: two reports
	c.report(t, Member{Name: "b", Epoch: 3, Fenced: 5})
	c.term(t, Term{Epoch: 4, Primary: "z", Starting: []string{}})
	c.term(t, Term{Epoch: 5, Primary: "y", Starting: []string{"a"}})
	if w := c.elect(t); w != nil {
		t.Fatal("elected on a report from before term 4, which may have acknowledged writes without it")
	}
	// b was a member terms 4 and 5 started with and had no session in
	// either: neither acknowledged anything.
	c.term(t, Term{Epoch: 4, Primary: "z", Starting: []string{"b"}})
	c.term(t, Term{Epoch: 5, Primary: "y", Starting: []string{"a", "b"}})
	if w := c.elect(t); w == nil {
		t.Fatal("not elected, though the terms b missed acknowledged nothing")
	}
}

func (c *candidate) term(t *testing.T, tr Term) {
	t.Helper()
	_, err := c.cli.Put(context.Background(), c.n.k.term(tr.Epoch), encode(tr))
	must(t, err)
}
