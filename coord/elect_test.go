package coord

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pbfs/pbfs/internal/etcdtest"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/backup"
)

// Elections on a real etcd, with a real backup for the candidate and the
// other members' reports written by hand.

// candidate is a node named "a" whose backup serves vol-1, had a session
// in term 5 and was told the policy {1 of 2} in it (two reports prove an
// acknowledged batch), in a cluster whose last term, epoch 5, has ended.
type candidate struct {
	n   *Node
	b   *backup.Backup
	cli *clientv3.Client
	t   ended
	rev int64 // a revision with no leader
}

func newCandidate(t *testing.T) *candidate {
	t.Helper()
	return newCandidateWith(t, 5, 1, 2)
}

// newCandidateWith is newCandidate whose backup last had a session in
// term epoch, and was told the policy {need of of}.
func newCandidateWith(t *testing.T, epoch uint64, need, of uint32, prep ...func(*journal.Store)) *candidate {
	t.Helper()
	c := etcdtest.Start(t, 1)
	eps := strings.Split(strings.TrimPrefix(c.Endpoints(), "etcd://"), ",")
	n, err := Open(Config{Endpoints: eps, Name: "a", Listen: "127.0.0.1:0"})
	must(t, err)
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go n.keepMember(ctx)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n.mu.Lock()
		id := n.memberLease
		n.mu.Unlock()
		if id != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no member lease")
		}
	}
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	must(t, os.Mkdir(vol, 0o755))
	// What a primary's Hello leaves in the journal: the volume, and the
	// policy {Need 1, Of 2} (replicate's AckPolicy encoding).
	st, err := journal.OpenStore(jdir, journal.StoreOptions{})
	must(t, err)
	must(t, st.SetMeta("volume", []byte("vol-1")))
	must(t, st.SetMeta("ackpolicy", append(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, need), of), 0)))
	must(t, st.SetEpoch(epoch))
	for _, f := range prep {
		f(st)
	}
	must(t, st.Close())
	b, err := backup.Open(backup.Config{Volume: vol, Journal: jdir, Token: "t"})
	must(t, err)
	t.Cleanup(func() { b.Close() })
	if st := b.Status(); st.Policy.Need != need || st.Policy.Of != of || st.Epoch != epoch || st.Stalled != (len(prep) > 0) {
		t.Fatalf("status %+v", st)
	}
	put, err := n.cli.Put(context.Background(), n.k.epoch(), "5")
	must(t, err)
	must(t, b.Fence(context.Background(), 5))
	return &candidate{n: n, b: b, cli: n.cli, t: ended{epoch: 5, rev: put.Header.Revision}, rev: put.Header.Revision}
}

// report writes another member's report.
func (c *candidate) report(t *testing.T, m Member) {
	t.Helper()
	m.Role, m.Volume = "backup", "vol-1"
	_, err := c.cli.Put(context.Background(), c.n.k.member(m.Name), encode(m))
	must(t, err)
}

func (c *candidate) elect(t *testing.T) *won {
	t.Helper()
	w, err := c.n.elect(context.Background(), c.rev, c.t, c.b, "old")
	must(t, err)
	return w
}

// TestElectionCountsOnlyFencedReports: a report made before its backup
// was fenced at the ended epoch does not count (that backup may have
// acknowledged more to the old primary since); once it is fenced, it does.
func TestElectionCountsOnlyFencedReports(t *testing.T) {
	c := newCandidate(t)
	c.report(t, Member{Name: "b", Epoch: 5, Fenced: 4})
	if w := c.elect(t); w != nil {
		t.Fatalf("elected at epoch %d on a report made before its backup was fenced", w.epoch)
	}
	c.report(t, Member{Name: "b", Epoch: 5, Fenced: 5})
	w := c.elect(t)
	if w == nil || w.epoch != 6 {
		t.Fatalf("not elected with two fenced reports: %+v", w)
	}
}

// TestElectionStartsAgainAfterATermItDidNotSee: a whole term (6) began and
// ended between the read the reports were fenced against (5) and the
// take-over. Its backups may have acknowledged batches after their
// reports, so the take-over fails and the election starts again.
func TestElectionStartsAgainAfterATermItDidNotSee(t *testing.T) {
	c := newCandidate(t)
	c.report(t, Member{Name: "b", Epoch: 5, Fenced: 5})
	_, err := c.cli.Put(context.Background(), c.n.k.epoch(), "6")
	must(t, err)
	if w := c.elect(t); w != nil {
		t.Fatalf("took epoch %d after a term the reports were not fenced against", w.epoch)
	}
	r, err := c.cli.Get(context.Background(), c.n.k.epoch())
	must(t, err)
	if string(r.Kvs[0].Value) != "6" {
		t.Fatalf("epoch key %s", r.Kvs[0].Value)
	}
}

// TestElectionWaitsForAStalledBackupsBatches: the backup holding the most
// is stalled (an apply failed; it still stores and acknowledges). It may
// hold the only copy of an acknowledged batch, so the less current one
// is not elected.
func TestElectionWaitsForAStalledBackupsBatches(t *testing.T) {
	c := newCandidate(t)
	c.report(t, Member{Name: "b", Epoch: 5, Fenced: 5, Durable: 10, Stalled: true})
	if w := c.elect(t); w != nil {
		t.Fatalf("elected without the batches a stalled backup holds")
	}
	c.report(t, Member{Name: "b", Epoch: 5, Fenced: 5, Durable: 0, Stalled: true})
	if w := c.elect(t); w == nil {
		t.Fatal("not elected, though the stalled backup holds nothing more")
	}
}

// TestElectionIgnoresADeposedPrimarysReport: the old primary rejoined as a
// backup before the election and waits for its resync, stalled, holding
// batches its backups never acknowledged. It neither blocks the election
// (before, no primary was ever elected again) nor counts toward it (it
// was in no ack set).
func TestElectionIgnoresADeposedPrimarysReport(t *testing.T) {
	c := newCandidate(t)
	c.report(t, Member{Name: "old", Epoch: 5, Fenced: 5, Durable: 10, Stalled: true, FormerEpoch: 5})
	if w := c.elect(t); w != nil {
		t.Fatal("elected on its own report and a deposed primary's")
	}
	c.report(t, Member{Name: "b", Epoch: 5, Fenced: 5})
	if w := c.elect(t); w == nil {
		t.Fatal("not elected with two fenced backups' reports: the deposed primary's blocked it")
	}
}

// TestElectionCountsAnEarlierDeposedPrimary: a primary deposed in an
// earlier term (4) that never got its resync was a member of the ended
// term, stalled throughout, so it acknowledged nothing: its report counts
// toward the quorum, and what it holds past the others does not block.
// Before, two failovers in a row left no primary (two deposed primaries,
// one backup).
func TestElectionCountsAnEarlierDeposedPrimary(t *testing.T) {
	c := newCandidate(t)
	c.report(t, Member{Name: "older", Epoch: 5, Fenced: 5, Durable: 10, Stalled: true, FormerEpoch: 4})
	if w := c.elect(t); w == nil {
		t.Fatal("not elected with an earlier deposed primary's report")
	}
}

// TestElectionTakesAnEpochAboveEveryFence: a report fenced at 9 (the epoch
// key went backwards, say restored from a snapshot): the new term is above
// it, or that backup would refuse the new primary.
func TestElectionTakesAnEpochAboveEveryFence(t *testing.T) {
	c := newCandidate(t)
	c.report(t, Member{Name: "b", Epoch: 5, Fenced: 9})
	if w := c.elect(t); w == nil || w.epoch != 10 {
		t.Fatalf("elected at %+v, want epoch 10", w)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
