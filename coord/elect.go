package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/wire"
)

// An election starts when the leader key is gone: the primary's lease
// lapsed (it died, or it cannot reach etcd), etcd revoked it, or the
// primary stepped down. Every backup first fences itself at the ended
// term's epoch (replicate's Backup.Fence: it refuses that primary from
// then on), republishes its state, waits settle for the others to do the
// same, and then only the most current eligible backup (ties: the
// smallest name) tries to take the term, with a compare-and-swap that
// succeeds only if no leader exists and the epoch is still the one it
// read. Eligible: not stalled, and it can prove it holds every
// acknowledged batch. A barrier of the old primary returned once Need of
// its Of backups held the batch; any Of-Need+1 backups include one of
// those, a report made after the fence holds everything its backup will
// ever acknowledge to the old primary, and histories are prefixes of one
// another, so the most current of Of-Need+1 fenced reports (its own
// included) holds every acknowledged batch, however long the old primary
// goes on believing it holds its lease. With Degrade every backup must
// report (a dropped one does not know it was dropped).

// settle is how long a candidate waits for the others' fresh reports.
const settle = 3 * publishEvery

// won is what a node that won an election holds.
type won struct {
	epoch  uint64
	lease  *lease
	from   string    // the old primary, if known
	lapsed time.Time // when this node saw the old term end
	// first: no term was decided before this one (no epoch key existed)
	first bool
	// forced: taken by an operator's order, against the rule (force.go)
	forced bool
}

// awaitElection waits while another node leads, and runs elections while
// none does, until this node wins (true) or ctx ends.
func (n *Node) awaitElection(ctx context.Context, b *backup.Backup) (bool, error) {
	lastLeader := ""
	for ctx.Err() == nil {
		// The leader and the epoch at one revision: the epoch a term that
		// ended had, never a newer term's.
		resp, err := retried(ctx, func(c context.Context) (*clientv3.TxnResponse, error) {
			return n.cli.Txn(c).Then(clientv3.OpGet(n.k.leader()), clientv3.OpGet(n.k.epoch())).Commit()
		})
		if err != nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		lk, ek := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
		if len(lk) > 0 {
			var l Leader
			json.Unmarshal(lk[0].Value, &l)
			lastLeader = l.Name
			n.refusing("")
			// Wait for the leader key to go (the term to end).
			// The watch may sit on a member that hangs: look again every
			// TTL/2 as well.
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			ch := n.cli.Watch(wctx, n.k.leader(), clientv3.WithRev(resp.Header.Revision+1))
			recheck := time.NewTicker(max(n.cfg.TTL/2, time.Second))
		watch:
			for {
				select {
				case wr, ok := <-ch:
					if !ok || wr.Err() != nil {
						break watch
					}
					for _, ev := range wr.Events {
						if ev.Type == clientv3.EventTypeDelete {
							break watch
						}
					}
				case <-recheck.C:
					gctx, gcancel := bounded(ctx)
					r, err := n.cli.Get(gctx, n.k.leader())
					gcancel()
					if err == nil && len(r.Kvs) == 0 {
						break watch
					}
				}
			}
			recheck.Stop()
			cancel()
			continue
		}
		lapsed := time.Now()
		var t ended
		if len(ek) > 0 {
			if t.epoch, err = strconv.ParseUint(string(ek[0].Value), 10, 64); err != nil {
				n.log.Error("the coordinator's epoch key is not a number; no election until it is", "key", n.k.epoch(), "value", string(ek[0].Value))
				sleep(ctx, time.Second)
				continue
			}
			t.rev = ek[0].ModRevision
		}
		if err := b.Fence(ctx, t.epoch); err != nil {
			n.log.Error("cannot fence the term that ended; this backup takes no part in the election", "epoch", t.epoch, "err", err)
			sleep(ctx, settle)
			continue
		}
		w, err := n.elect(ctx, resp.Header.Revision, t, b, lastLeader)
		if err != nil {
			n.log.Warn("election attempt failed", "err", err)
		}
		if w != nil {
			w.lapsed = lapsed
			n.won = w
			return true, nil
		}
		sleep(ctx, settle)
	}
	return false, nil
}

// ended is the term that ended, as read with the leader key gone.
type ended struct {
	epoch uint64 // 0: no term was decided yet
	rev   int64  // the epoch key's ModRevision (0: no key)
}

// elect tries to take the next term; nil if this node should not or did
// not win. rev is a revision at which no leader existed, and t the term
// that ended, at whose epoch this node's backup is fenced.
func (n *Node) elect(ctx context.Context, rev int64, t ended, b *backup.Backup, oldLeader string) (*won, error) {
	st := b.Status()
	me := n.backupMember(st)
	if err := n.publish(ctx, me); err != nil {
		return nil, err
	}
	if !sleep(ctx, settle) {
		return nil, ctx.Err()
	}
	tr, err := retried(ctx, func(c context.Context) (*clientv3.TxnResponse, error) {
		return n.cli.Txn(c).Then(clientv3.OpGet(n.k.members(), clientv3.WithPrefix()), clientv3.OpGet(n.k.terms(), clientv3.WithPrefix())).Commit()
	})
	if err != nil {
		return nil, err
	}
	resp := tr.Responses[0].GetResponseRange()
	var fresh, reported []Member
	unfenced := 0
	// Above every epoch a report names, and every fence: a backup refuses
	// a primary of its fence's epoch.
	floor := max(t.epoch, st.Epoch, st.Fenced)
	for _, kv := range resp.Kvs {
		var m Member
		if json.Unmarshal(kv.Value, &m) != nil || kv.ModRevision <= rev || m.Role != "backup" {
			continue
		}
		if st.VolumeID != "" && m.Volume != "" && m.Volume != st.VolumeID {
			continue
		}
		floor = max(floor, m.Epoch, m.Fenced)
		if m.FormerEpoch != 0 && m.FormerEpoch >= t.epoch {
			// The ended term's own primary, rejoined and waiting for its
			// resync: in no ack set, and what it holds past its backups
			// was never acknowledged. (A deposed primary of an earlier
			// term was a member of this one, stalled throughout: it
			// counts, acknowledging nothing, and is never followed.)
			continue
		}
		reported = append(reported, m) // fenced or not: it holds at least Durable
		if t.epoch > 0 && m.Fenced < t.epoch {
			// Made before the backup refused the old primary: it may
			// acknowledge more after it.
			unfenced++
			continue
		}
		fresh = append(fresh, m)
	}
	// Only reports whose policy covers every term since their Epoch count
	// (terms.go).
	h := history{terms: parseTerms(tr.Responses[1].GetResponseRange().Kvs), reports: fresh}
	current, stale := h.counted(fresh, t.epoch)
	reason := ""
	if e := h.missed(st.Epoch, t.epoch); e != 0 {
		reason = fmt.Sprintf("this backup had no session in term %d, which may have acknowledged writes it lacks", e)
	} else if reason = n.eligible(st, current); reason != "" && stale > 0 {
		reason += fmt.Sprintf(" (%d more had no session in a term that may have acknowledged writes, and do not count)", stale)
	}
	if reason == "" {
		return n.takeTerm(ctx, st, t, floor, oldLeader, false)
	}
	if unfenced > 0 {
		reason += fmt.Sprintf(" (%d more reported before fencing epoch %d, and do not count)", unfenced, t.epoch)
	}
	if !n.ordered(ctx, st, t, reason, h, reported) {
		return nil, nil
	}
	return n.takeTerm(ctx, st, t, floor, oldLeader, true)
}

// refusing logs why this node does not take the term, once per reason
// while no primary serves, and publishes it with the member record.
func (n *Node) refusing(reason string) {
	n.mu.Lock()
	same := n.refused == reason
	n.refused = reason
	n.mu.Unlock()
	if !same && reason != "" {
		n.log.Info("not taking over", "why", reason)
	}
}

// eligible says why this backup must not take the term ("" if it may).
func (n *Node) eligible(st backup.Status, fresh []Member) string {
	if st.Stalled {
		return "this backup is stalled (it needs a resync)"
	}
	sort.Slice(fresh, func(i, j int) bool {
		if fresh[i].Durable != fresh[j].Durable {
			return fresh[i].Durable > fresh[j].Durable
		}
		return fresh[i].Name < fresh[j].Name
	})
	best := ""
	for _, m := range fresh {
		if !m.Stalled {
			best = m.Name
			break
		}
	}
	switch best {
	case n.cfg.Name:
	case "":
		return "no report of a backup that is not stalled counts yet, this node's own included"
	default:
		return fmt.Sprintf("%s is more current", best)
	}
	// A stalled backup still stores, and may have acknowledged, batches
	// it cannot apply: one that holds more than this one may hold the
	// only copy of an acknowledged batch.
	if top := mostCurrentMember(fresh); top.Stalled && top.Durable > st.CompleteSeq {
		return fmt.Sprintf("%s holds batches up to %d and this backup only up to %d, and it is stalled (it needs a resync): no eligible backup is sure to hold every acknowledged batch (pbfs elect --force chooses)", top.Name, top.Durable, st.CompleteSeq)
	}
	need := 1
	if p := st.Policy; p.Known() {
		need = int(p.Of - p.Need + 1)
		if p.Degrade {
			need = int(p.Of)
		}
	}
	if len(fresh) < need {
		return fmt.Sprintf("only %d backups reported; %d must, to prove no acknowledged batch is missing", len(fresh), need)
	}
	return ""
}

// mostCurrentMember is the first of sorted fresh that is not a deposed
// primary waiting for its resync: what such a one holds past the others
// was never acknowledged.
func mostCurrentMember(fresh []Member) Member {
	for _, m := range fresh {
		if m.FormerEpoch == 0 {
			return m
		}
	}
	return Member{}
}

// takeTerm takes the next term, above floor, with a compare-and-swap: it
// succeeds only if no leader exists and the epoch key is as it was when
// the term t ended. A term that began and ended since then was not the
// one the reports were fenced against: the election starts again.
func (n *Node) takeTerm(ctx context.Context, st backup.Status, t ended, floor uint64, oldLeader string, forced bool) (*won, error) {
	if t.rev != 0 && st.VolumeID == "" {
		// A term was decided, and this node never received the volume:
		// alone, it would start an empty one and resync the others to it.
		n.refusing("this node never received the volume, and a term was decided before")
		return nil, nil
	}
	if floor >= wire.MaxEpoch-1 {
		// Stored from a Hello by a version that took any epoch: the next
		// term would be out of range, or wrap round to 0.
		n.refusing(fmt.Sprintf("a member reports epoch %d, which no term can follow: restart it with this version, which repairs it", floor))
		return nil, nil
	}
	epoch := floor + 1
	// The lease runs from when etcd grants it: count from before asking.
	sent := time.Now()
	g, err := retried(ctx, func(c context.Context) (*clientv3.LeaseGrantResponse, error) {
		return n.cli.Grant(c, int64(n.cfg.TTL/time.Second))
	})
	if err != nil {
		return nil, err
	}
	l := newLease(n.cli, g.ID, time.Duration(g.TTL)*time.Second, n.log, n.m)
	leader := Leader{Name: n.cfg.Name, Addr: n.cfg.Advertise, Proxy: n.cfg.ProxyAdvertise, Epoch: epoch, Since: time.Now().UTC(), TTL: l.ttl, LeaseID: int64(g.ID)}
	tctx, tcancel := bounded(ctx)
	defer tcancel()
	tr, err := n.cli.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(n.k.leader()), "=", 0),
			clientv3.Compare(clientv3.ModRevision(n.k.epoch()), "=", t.rev)).
		Then(clientv3.OpPut(n.k.leader(), encode(leader), clientv3.WithLease(g.ID)),
			clientv3.OpPut(n.k.epoch(), strconv.FormatUint(epoch, 10)),
			clientv3.OpDelete(n.k.force())). // an order is for one vacancy
		Commit()
	if err != nil || !tr.Succeeded {
		rctx, rcancel := bounded(context.Background())
		n.cli.Revoke(rctx, g.ID) // if the Txn did succeed, the leader key goes with it
		rcancel()
		return nil, err
	}
	l.renewed(sent)
	n.m.terms.Inc()
	n.log.Warn("took over as the primary", "epoch", epoch, "after", oldLeader, "durable_seq", st.CompleteSeq)
	n.refusing("")
	return &won{epoch: epoch, lease: l, from: oldLeader, first: t.rev == 0, forced: forced}, nil
}
