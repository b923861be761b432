package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// An election that cannot prove a candidate holds every acknowledged
// batch elects nobody, and goes on electing nobody: too few members
// report (two of three machines lost), a stalled member holds more than
// the others, or the first primary was lost before any other node
// received the volume. Only an operator can trade what the missing
// members may hold for a serving primary. Force records that decision in
// etcd for the vacancy it was made in; the named node takes the next term
// at its next election attempt, and any new term clears the order.

// Forced is an operator's order that one node take the next term
// although the election's rule does not prove it holds every
// acknowledged batch (`pbfs elect --force`).
type Forced struct {
	Name string `json:"name"`
	// Ended is the epoch of the term that had ended when the order was
	// given: the order is for that vacancy only.
	Ended uint64    `json:"ended_epoch"`
	At    time.Time `json:"at"`
	// Why is what the named node's last refusal said, if it had published one.
	Why string `json:"why,omitempty"`
}

var (
	// ErrPrimaryServes refuses an order while a primary holds the term.
	ErrPrimaryServes = errors.New("a primary serves")
	// ErrNotEligible refuses an order for a node that cannot serve at all.
	ErrNotEligible = errors.New("the node cannot serve")
)

// Force orders node name to take the next term of cluster, against the
// election's rule. It refuses while a primary serves, and for a node that
// could not serve the volume: one with no backup record, a stalled one
// (its volume needs a resync from a primary; a deposed primary waiting
// for its resync is stalled), or one that never received the volume. The
// order stands until a term is taken.
func Force(ctx context.Context, endpoints []string, cluster, name string) (Forced, error) {
	cli, err := dial(endpoints)
	if err != nil {
		return Forced{}, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	k := keys{"/pbfs/" + cluster}
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(k.leader()), clientv3.OpGet(k.epoch()), clientv3.OpGet(k.member(name))).Commit()
	if err != nil {
		return Forced{}, fmt.Errorf("force election: %w", err)
	}
	lk, ek, mk := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs, resp.Responses[2].GetResponseRange().Kvs
	if len(lk) > 0 {
		var l Leader
		json.Unmarshal(lk[0].Value, &l)
		return Forced{}, fmt.Errorf("force election: %s is the primary of epoch %d: %w", l.Name, l.Epoch, ErrPrimaryServes)
	}
	var m Member
	if len(mk) == 0 || json.Unmarshal(mk[0].Value, &m) != nil {
		return Forced{}, fmt.Errorf("force election: no member %q is up in cluster %q (pbfs status --coordinator lists them): %w", name, cluster, ErrNotEligible)
	}
	if m.Role != "backup" {
		return Forced{}, fmt.Errorf("force election: %s is %s, not waiting as a backup: %w", name, m.Role, ErrNotEligible)
	}
	switch {
	case m.FormerEpoch > 0:
		return Forced{}, fmt.Errorf("force election: %s served as the primary of epoch %d and waits for a resync: its volume may hold writes it never journaled: %w", name, m.FormerEpoch, ErrNotEligible)
	case m.Stalled:
		return Forced{}, fmt.Errorf("force election: %s is stalled: its volume needs a resync from a primary: %w", name, ErrNotEligible)
	case m.Volume == "" && len(ek) > 0:
		return Forced{}, fmt.Errorf("force election: %s never received the volume: %w", name, ErrNotEligible)
	}
	f := Forced{Name: name, At: time.Now().UTC(), Why: m.Refused}
	var rev int64
	if len(ek) > 0 {
		if f.Ended, err = strconv.ParseUint(string(ek[0].Value), 10, 64); err != nil {
			return Forced{}, fmt.Errorf("force election: the epoch key holds %q, not a number", ek[0].Value)
		}
		rev = ek[0].ModRevision
	}
	tr, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.leader()), "=", 0),
			clientv3.Compare(clientv3.ModRevision(k.epoch()), "=", rev)).
		Then(clientv3.OpPut(k.force(), encode(f))).
		Commit()
	if err != nil {
		return Forced{}, fmt.Errorf("force election: %w", err)
	}
	if !tr.Succeeded {
		return Forced{}, errors.New("force election: a term began meanwhile; look again (pbfs status --coordinator)")
	}
	return f, nil
}

// forcedFor reads the operator's order for the vacancy after term ended,
// if it names this node.
func (n *Node) forcedFor(ctx context.Context, ended uint64) (Forced, bool) {
	r, err := retried(ctx, func(c context.Context) (*clientv3.GetResponse, error) {
		return n.cli.Get(c, n.k.force())
	})
	var f Forced
	if err != nil || len(r.Kvs) == 0 || json.Unmarshal(r.Kvs[0].Value, &f) != nil {
		return Forced{}, false
	}
	return f, f.Name == n.cfg.Name && f.Ended == ended
}
