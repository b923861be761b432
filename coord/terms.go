package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/wire"
)

// A backup's ack policy is the one the last primary that streamed to it
// told it, in the term of its Epoch. A member down for a whole later term
// still holds that policy, and by it alone may prove nothing about the
// writes that later term acknowledged without it: with --ack all ({2 of
// 2}: one report proves all), a member that was down while another was
// elected, and acknowledged with a third, would be elected alone once
// those two were lost, without their writes.
//
// So every primary records, before it can acknowledge anything, the term
// and the members it starts with (terms/EPOCH, no lease, never deleted).
// A primary's barriers wait for every member it started with that has
// not confirmed this term's policy (replicate's quorum: 1), so a member it
// started with that reports an Epoch below the term never had a session
// in it, and the term acknowledged nothing. A term with no record never
// served: its primary records it before it mounts. Every other term may
// have acknowledged writes, and an election counts a report only if no
// such term lies between its Epoch and the ended term (current).

// Term is a term's record.
type Term struct {
	Epoch   uint64 `json:"epoch"`
	Primary string `json:"primary"`
	// Starting names the members the primary started with: it waits for
	// each of them until it confirms the term's policy.
	Starting []string  `json:"starting"`
	At       time.Time `json:"at"`
	// Listed: the primary acknowledges nothing without a backup
	// (--min-backups 1 or more), and Joined names every member it
	// streamed to beyond Starting, each recorded before it was added.
	// Records of earlier versions have neither.
	Listed bool     `json:"listed,omitempty"`
	Joined []string `json:"joined,omitempty"`
}

func (k keys) terms() string { return path.Join(k.prefix, "terms") + "/" }

// term is the key of epoch's record: zero-padded, so keys sort by epoch.
func (k keys) term(epoch uint64) string { return fmt.Sprintf("%s%020d", k.terms(), epoch) }

// recordTerm records the term this node won and the members it starts
// with, before it serves, and returns the record.
func (n *Node) recordTerm(ctx context.Context, epoch uint64, starting []Member) (Term, error) {
	t := Term{Epoch: epoch, Primary: n.cfg.Name, Starting: []string{}, At: time.Now().UTC(),
		Listed: n.cfg.Mount.MinBackups > 0 && n.cfg.Mount.Ack != "none"}
	for _, m := range starting {
		t.Starting = append(t.Starting, m.Name)
	}
	return t, n.putTerm(ctx, t)
}

// recordJoined adds name to the term's record before the primary streams
// to it: an election then knows every member the term could have counted
// an ack from.
func (n *Node) recordJoined(ctx context.Context, t *Term, name string) error {
	if slices.Contains(t.Starting, name) || slices.Contains(t.Joined, name) {
		return nil
	}
	next := *t
	next.Joined = append(slices.Clone(t.Joined), name)
	if err := n.putTerm(ctx, next); err != nil {
		return err
	}
	*t = next
	return nil
}

func (n *Node) putTerm(ctx context.Context, t Term) error {
	_, err := retried(ctx, func(c context.Context) (*clientv3.PutResponse, error) {
		return n.cli.Put(c, n.k.term(t.Epoch), encode(t))
	})
	if err != nil {
		return fmt.Errorf("record term %d: %w", t.Epoch, err)
	}
	return nil
}

// epochIssued is the backup role's EpochIssued hook (replicate's
// epoch.go): a primary may raise this node's backup to an epoch only if
// a term of it was recorded (terms/EPOCH), or it is the current term (a
// primary of a version that records none). A token holder's Hello of an
// epoch no election issued is refused, so it cannot raise a backup past
// the term the next election takes.
func (n *Node) epochIssued(ctx context.Context, epoch uint64) error {
	resp, err := retried(ctx, func(c context.Context) (*clientv3.TxnResponse, error) {
		return n.cli.Txn(c).Then(clientv3.OpGet(n.k.term(epoch), clientv3.WithCountOnly()), clientv3.OpGet(n.k.epoch())).Commit()
	})
	if err != nil {
		return fmt.Errorf("ask etcd about epoch %d: %w", epoch, err)
	}
	if resp.Responses[0].GetResponseRange().Count > 0 {
		return nil
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 && string(kvs[0].Value) == strconv.FormatUint(epoch, 10) {
		return nil
	}
	return fmt.Errorf("%w: etcd records no term %d", backup.ErrEpochNotIssued, epoch)
}

// backupConfig is the backup role's configuration. A primary may raise
// its epoch only to one the coordinator issued (terms.go), and a journal
// holding an epoch no term can take goes back to the current term's.
func (n *Node) backupConfig(ctx context.Context) backup.Config {
	bcfg := n.cfg.Backup
	bcfg.Volume, bcfg.Journal = n.volume(), n.cfg.Mount.Journal
	bcfg.Logger = n.log
	bcfg.EpochIssued = n.epochIssued
	if er, err := n.cli.Get(ctx, n.k.epoch()); err == nil && len(er.Kvs) == 0 {
		bcfg.FirstTerm = true // a journal a pbfs mount left is the volume's copy
	} else if err == nil {
		if e, err := strconv.ParseUint(string(er.Kvs[0].Value), 10, 64); err == nil && e < wire.MaxEpoch {
			bcfg.RepairEpoch = e
		}
	}
	return bcfg
}

// history is what an election knows of the terms: their records, read
// with the reports, and the reports made after the ended term's fence.
type history struct {
	terms   map[uint64]Term
	reports []Member // fresh, fenced, of this volume, this node's own included
}

func parseTerms(kvs []*mvccpb.KeyValue) map[uint64]Term {
	out := map[uint64]Term{}
	for _, kv := range kvs {
		var t Term
		if json.Unmarshal(kv.Value, &t) == nil && t.Epoch > 0 {
			out[t.Epoch] = t
		}
	}
	return out
}

// mayHaveAcked says whether term e may have acknowledged writes: it has
// a record, and none of the members it started with reports an Epoch
// below it (its barriers waited for each of them). A term that started
// with nobody, and listed every member it streamed to while it could not
// acknowledge without one, acknowledged nothing if each of those reports
// an Epoch below it (none ever had a session in it). A member without
// the volume proves nothing: its journal may have been wiped since.
func (h history) mayHaveAcked(e uint64) bool {
	t, ok := h.terms[e]
	if !ok {
		return false
	}
	for _, m := range h.reports {
		if h.missedBy(m, e) && slices.Contains(t.Starting, m.Name) {
			return false
		}
	}
	if !t.Listed || len(t.Starting) > 0 {
		return true
	}
	for _, name := range t.Joined {
		if !slices.ContainsFunc(h.reports, func(m Member) bool { return m.Name == name && h.missedBy(m, e) }) {
			return true // it may have had a session, and acked
		}
	}
	return false
}

// missedBy says whether m's report proves it had no session in term e.
func (h history) missedBy(m Member, e uint64) bool { return m.Epoch < e && m.Volume != "" }

// missed returns the newest term after epoch, up to ended, that may have
// acknowledged writes, or 0: a report of that Epoch proves nothing about
// it.
func (h history) missed(epoch, ended uint64) uint64 {
	var newest uint64
	for e := range h.terms {
		if e > epoch && e <= ended && e > newest && h.mayHaveAcked(e) {
			newest = e
		}
	}
	return newest
}

// counted splits reports into those whose policy covers every term up to
// ended (they count) and the number of the others.
func (h history) counted(reports []Member, ended uint64) ([]Member, int) {
	var out []Member
	for _, m := range reports {
		if h.missed(m.Epoch, ended) == 0 {
			out = append(out, m)
		}
	}
	return out, len(reports) - len(out)
}
