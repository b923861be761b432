package primary

import (
	"testing"
	"time"

	"github.com/pbfs/pbfs/replicate/internal/repltest"

	"github.com/pbfs/pbfs/replicate/wire"
)

// A joining backup is told it is out of the ack set: its policy carries
// the degrade flag, with which an election waits for every backup's
// report. Once it joins, a new session tells it the ack set's policy. A
// joining backup told "need 1 of 1" took its own report for proof that it
// held every acknowledged batch, and was elected without them.
func TestJoiningBackupIsToldItIsOutOfTheAckSet(t *testing.T) {
	p, err := Start(Config{Ack: "all", Token: "right", VolumeID: "v", Store: repltest.StoreWithOneBatch(t), Dynamic: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	addr := repltest.UnusedAddr(t)
	if err := p.AddBackup(addr); err != nil {
		t.Fatal(err)
	}
	if pol := p.list()[0].announced(); !pol.Degrade || pol.Need != 1 || pol.Of != 1 {
		t.Fatalf("a joining backup is announced %+v, want the degrade flag", pol)
	}
	b, _ := repltest.ServeBackup(t, addr)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st := b.Status()
		if st.DurableSeq >= 1 && st.Policy == (wire.AckPolicy{Need: 1, Of: 1}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backup holds seq %d and the policy %+v, want the ack set's {1 1 false}", st.DurableSeq, st.Policy)
		}
	}
}

// A barrier returns only when no backup lacking its batch could be elected
// by the policy it last confirmed: one told {1 of 1} before another joined
// takes its own report for proof.
func TestSafeCountsEachBackupsOwnRule(t *testing.T) {
	backup := func(p *wire.AckPolicy, added bool) *Shipper {
		s := &Shipper{added: added}
		if p != nil {
			s.confirmed.Store(p)
		}
		return s
	}
	holder := backup(&wire.AckPolicy{Need: 1, Of: 2}, false)
	for _, tc := range []struct {
		what  string
		other *Shipper
		safe  bool
	}{
		{"told {1 of 1}", backup(&wire.AckPolicy{Need: 1, Of: 1}, false), false},
		{"told {1 of 2}", backup(&wire.AckPolicy{Need: 1, Of: 2}, false), true},
		{"told {1 of 2}, degrade", backup(&wire.AckPolicy{Need: 1, Of: 2, Degrade: true}, false), true},
		{"told {2 of 2}", backup(&wire.AckPolicy{Need: 2, Of: 2}, false), false},
		{"told nothing this term, there from its start", backup(nil, false), false},
		{"told nothing this term, added since", backup(nil, true), true},
	} {
		e := electable{n: 2}
		e.add(holder, true)
		e.add(tc.other, false)
		got := e.safe()
		if got != tc.safe {
			t.Errorf("the holder and a backup %s: safe %v, want %v", tc.what, got, tc.safe)
		}
	}
}
