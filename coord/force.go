package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pbfs/pbfs/replicate/backup"
)

// An election that cannot prove a candidate holds every acknowledged
// batch elects nobody, and goes on electing nobody: too few members
// report (two of three nodes lost), a stalled member holds more than the
// others, or the members that report missed a term that may have
// acknowledged writes (terms.go). Only an operator can trade what the
// missing members may hold for a serving primary. Force records that
// decision in etcd for the vacancy it was made in; the named node takes
// the next term at its next election attempt, and any new term clears the
// order. An order cannot make a node serve a volume it cannot serve:
// stalled, a deposed primary waiting for its resync, or without the
// volume (a new cluster whose first primary was lost before any other
// node received the volume stays without one).

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
// could not serve the volume (orderable). The order stands until a term
// is taken.
func Force(ctx context.Context, endpoints []string, cluster, name string) (Forced, error) {
	cli, err := dial(endpoints)
	if err != nil {
		return Forced{}, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	k := keys{"/pbfs/" + cluster}
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(k.leader()), clientv3.OpGet(k.epoch()), clientv3.OpGet(k.force()),
		clientv3.OpGet(k.members(), clientv3.WithPrefix())).Commit()
	if err != nil {
		return Forced{}, fmt.Errorf("force election: %w", err)
	}
	kvs := func(i int) []*mvccpb.KeyValue { return resp.Responses[i].GetResponseRange().Kvs }
	if lk := kvs(0); len(lk) > 0 {
		var l Leader
		json.Unmarshal(lk[0].Value, &l)
		return Forced{}, fmt.Errorf("force election: %s is the primary of epoch %d: %w", l.Name, l.Epoch, ErrPrimaryServes)
	}
	var m *Member
	var others []Member
	for _, o := range decodeMembers(kvs(3)) {
		if o.Name == name {
			m = &o
		} else {
			others = append(others, o)
		}
	}
	if err := orderable(m, others, name, len(kvs(1)) > 0); err != nil {
		return Forced{}, fmt.Errorf("force election: %w", err)
	}
	f := Forced{Name: name, At: time.Now().UTC(), Why: m.Refused}
	var rev, forceRev int64
	if ek := kvs(1); len(ek) > 0 {
		if f.Ended, err = strconv.ParseUint(string(ek[0].Value), 10, 64); err != nil {
			return Forced{}, fmt.Errorf("force election: the epoch key holds %q, not a number", ek[0].Value)
		}
		rev = ek[0].ModRevision
	}
	if fk := kvs(2); len(fk) > 0 {
		forceRev = fk[0].ModRevision
	}
	// Nothing changed since the read: no term began, and no other order
	// was given meanwhile (two operators both told "ordered").
	tr, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.leader()), "=", 0),
			clientv3.Compare(clientv3.ModRevision(k.epoch()), "=", rev),
			clientv3.Compare(clientv3.ModRevision(k.force()), "=", forceRev)).
		Then(clientv3.OpPut(k.force(), encode(f))).
		Commit()
	if err != nil {
		return Forced{}, fmt.Errorf("force election: %w", err)
	}
	if !tr.Succeeded {
		return Forced{}, errors.New("force election: the cluster changed meanwhile (a term began, or another order was given); look again (pbfs status --coordinator)")
	}
	return f, nil
}

// orderable says why member m (nil: no record) cannot be ordered to take
// the term, given the other members' records and whether a term was
// decided before.
func orderable(m *Member, others []Member, name string, decided bool) error {
	switch {
	case m == nil:
		return fmt.Errorf("no member %q is up (pbfs status --coordinator lists them): %w", name, ErrNotEligible)
	case m.Role != "backup":
		return fmt.Errorf("%s is %s, not waiting as a backup: %w", name, m.Role, ErrNotEligible)
	case m.FormerEpoch > 0:
		return fmt.Errorf("%s served as the primary of epoch %d and waits for a resync: its volume may hold writes it never journaled: %w", name, m.FormerEpoch, ErrNotEligible)
	case m.Stalled:
		return fmt.Errorf("%s is stalled: its volume needs a resync from a primary: %w", name, ErrNotEligible)
	case m.Volume == "" && decided:
		return fmt.Errorf("%s never received the volume: %w", name, ErrNotEligible)
	}
	for _, o := range others {
		if o.Volume != "" && o.Volume != m.Volume {
			return fmt.Errorf("%s serves volume %s, and %s serves %s: %w", name, m.Volume, o.Name, o.Volume, ErrNotEligible)
		}
	}
	return nil
}

// ordered says whether an operator's order makes this node take the term
// the rule refused it for reason: the order names this node for this
// vacancy, this node is not stalled, and no member that reports and could
// serve holds more. An order gives up what missing members may hold,
// never what a member that is here holds: that one is the one to order.
// Otherwise it publishes the refusal.
func (n *Node) ordered(ctx context.Context, st backup.Status, t ended, reason string, h history, reported []Member) bool {
	order, ok := n.forcedFor(ctx, t.epoch)
	if !ok || st.Stalled {
		n.refusing(reason)
		return false
	}
	for _, m := range reported {
		if m.Name != n.cfg.Name && !m.Stalled && m.Durable > st.CompleteSeq && h.missed(m.Epoch, t.epoch) == 0 {
			n.refusing(fmt.Sprintf("%s; an operator's order names this node, but %s holds batches up to %d and this backup only up to %d: order %s instead",
				reason, m.Name, m.Durable, st.CompleteSeq, m.Name))
			return false
		}
	}
	n.log.Warn("taking over by the operator's order, although the election cannot prove this node holds every acknowledged write",
		"why_not", reason, "ordered_at", order.At)
	return true
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
