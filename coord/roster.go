package coord

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A node's member record (members/NAME) hangs on a lease keepMember keeps
// alive; publish writes it, and notes the node in the roster.
//
// The roster remembers every node that joined the cluster, without a
// lease: a member record (members/NAME) vanishes with its node's lease, so
// a cluster that lost a node would otherwise show only the nodes it has
// left. Each node notes itself there when it joins and every rosterEvery
// while it runs; a node in the roster without a member record is lost,
// gone since about its last note. `pbfs member remove --coordinator`
// forgets a node that is not coming back.

// Seen is a node's roster entry.
type Seen struct {
	Name string    `json:"name"`
	Addr string    `json:"addr"`
	Role string    `json:"role"` // the last one it published
	At   time.Time `json:"at"`   // when it last noted itself
}

// Lost is a node of the roster whose member record is gone.
type Lost struct {
	Seen
	// For is how long it has been gone: since its last note, which is
	// at most rosterEvery older than its last member record.
	For time.Duration `json:"gone_for_ns"`
}

// rosterEvery is how often a running node renews its roster entry: one
// small write a second per node keeps a lost node's time gone right to
// within a second.
const rosterEvery = time.Second

// ErrMemberLive refuses to forget a node whose member record is there.
var ErrMemberLive = errors.New("the node is running")

func (k keys) roster() string              { return path.Join(k.prefix, "roster") + "/" }
func (k keys) rosterOf(name string) string { return k.roster() + name }

// noteSeen writes m's node into the roster.
func (n *Node) noteSeen(ctx context.Context, m Member) {
	s := Seen{Name: n.cfg.Name, Addr: n.cfg.Advertise, Role: m.Role, At: time.Now().UTC()}
	if _, err := n.cli.Put(ctx, n.k.rosterOf(n.cfg.Name), encode(s)); err != nil && ctx.Err() == nil {
		n.log.Debug("note this node in the roster", "err", err)
	}
}

// lost lists the roster's nodes that have no member record.
func lost(roster []Seen, members []Member, now time.Time) []Lost {
	var out []Lost
	for _, s := range roster {
		live := false
		for _, m := range members {
			live = live || m.Name == s.Name
		}
		if !live {
			out = append(out, Lost{Seen: s, For: now.Sub(s.At)})
		}
	}
	return out
}

// Forget removes a node from cluster's roster, refusing one whose member
// record is there (it runs: stop it first).
func Forget(ctx context.Context, endpoints []string, cluster, name string) error {
	cli, err := dial(endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	k := keys{"/pbfs/" + cluster}
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k.member(name)), "=", 0)).
		Then(clientv3.OpDelete(k.rosterOf(name))).Commit()
	if err != nil {
		return fmt.Errorf("forget %s: %w", name, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("forget %s: %w: stop it first", name, ErrMemberLive)
	}
	if resp.Responses[0].GetResponseDeleteRange().Deleted == 0 {
		return fmt.Errorf("forget %s: cluster %q has no node of that name", name, cluster)
	}
	return nil
}

// clusters lists the cluster names etcd holds records of, for a status
// that found none under the name it was given.
func clusters(ctx context.Context, cli *clientv3.Client) []string {
	resp, err := cli.Get(ctx, "/pbfs/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil
	}
	var out []string
	for _, kv := range resp.Kvs {
		name, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), "/pbfs/"), "/")
		if len(out) == 0 || out[len(out)-1] != name {
			out = append(out, name)
		}
	}
	return out
}

// keepMember holds the lease the member record is attached to, renewing
// it, and granting a new one if etcd lost it.
func (n *Node) keepMember(ctx context.Context) {
	var down time.Time // since when etcd has refused a member lease
	var logged time.Time
	for ctx.Err() == nil {
		// Bounded: with no endpoint answering, the client retries until
		// its context ends, and the node would wait without a word.
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		g, err := n.cli.Grant(gctx, int64(n.cfg.TTL/time.Second)+1)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if down.IsZero() {
				down = time.Now()
			}
			if time.Since(logged) >= 30*time.Second {
				n.log.Warn("coordinator unreachable: this node cannot join the cluster; retrying", "endpoints", n.cfg.Endpoints, "for", time.Since(down).Round(time.Second), "err", err)
				logged = time.Now()
			}
			sleep(ctx, time.Second)
			continue
		}
		if !down.IsZero() {
			n.log.Info("coordinator reached", "after", time.Since(down).Round(time.Second))
			down, logged = time.Time{}, time.Time{}
		}
		n.mu.Lock()
		n.memberLease = g.ID
		n.mu.Unlock()
		ch, err := n.cli.KeepAlive(ctx, g.ID)
		if err != nil {
			continue
		}
		for range ch {
		}
	}
}

// publish puts this node's member record.
func (n *Node) publish(ctx context.Context, m Member) error {
	n.mu.Lock()
	id := n.memberLease
	n.mu.Unlock()
	if id == 0 {
		return errors.New("no member lease yet")
	}
	m.Name, m.Addr, m.Proxy, m.At = n.cfg.Name, n.cfg.Advertise, n.cfg.ProxyAdvertise, time.Now().UTC()
	_, err := retried(ctx, func(c context.Context) (*clientv3.PutResponse, error) {
		return n.cli.Put(c, n.k.member(n.cfg.Name), encode(m), clientv3.WithLease(id))
	})
	if last := n.noted.Load(); err == nil && (m.Role != n.notedRole.Load() || time.Since(time.Unix(0, last)) >= rosterEvery) {
		n.noted.Store(time.Now().UnixNano())
		n.notedRole.Store(m.Role)
		n.noteSeen(ctx, m)
	}
	return err
}
