package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pbfs/pbfs/internal/health"
)

// Report is the cluster as etcd sees it: what `pbfs status` shows.
type Report struct {
	Epoch    uint64    `json:"epoch"`
	Leader   *Leader   `json:"leader,omitempty"`
	LeaseTTL int64     `json:"lease_ttl_left_s"` // seconds left on the leader's lease, as etcd counts
	Members  []Member  `json:"members"`
	Failover *Failover `json:"last_failover,omitempty"`
	// Forced is an operator's standing order for the vacant term (force.go).
	Forced *Forced `json:"forced,omitempty"`
	// Lost: nodes that joined the cluster and whose member record is gone
	// (roster.go), with how long.
	Lost []Lost `json:"lost,omitempty"`
	// Degraded: what the cluster lacks, in words (Degradation); none when
	// a primary serves and every node it ever had is up and applying.
	Degraded []string `json:"degraded,omitempty"`
}

// ErrNoCluster: etcd holds no record of the cluster named.
var ErrNoCluster = errors.New("no such cluster")

// degradation lists what the cluster lacks: a primary, nodes it lost,
// members that cannot apply.
func (r *Report) degradation() []string {
	var out []string
	if r.Leader == nil {
		out = append(out, "no primary: an election is due or running")
	}
	if n := len(r.Lost); n > 0 {
		names := make([]string, 0, n)
		for _, l := range r.Lost {
			names = append(names, fmt.Sprintf("%s (%s, gone %v)", l.Name, l.Role, l.For.Round(time.Second)))
		}
		out = append(out, fmt.Sprintf("%d of %d nodes lost: %s", n, n+len(r.Members), strings.Join(names, ", ")))
	}
	for _, m := range r.Members {
		if m.Stalled {
			out = append(out, m.Name+" is stalled: it needs a resync")
		}
	}
	return out
}

// Lag is how many batches member m is behind the primary.
func (r *Report) Lag(m Member) uint64 {
	for _, p := range r.Members {
		if r.Leader != nil && p.Name == r.Leader.Name && p.Durable > m.Durable {
			return p.Durable - m.Durable
		}
	}
	return 0
}

// Status reads the cluster's state from etcd.
func Status(ctx context.Context, endpoints []string, cluster string) (*Report, error) {
	cli, err := dial(endpoints)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	k := keys{"/pbfs/" + cluster}
	resp, err := cli.Get(ctx, k.prefix+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	if len(resp.Kvs) == 0 {
		err := fmt.Errorf("%w %q in etcd at %s", ErrNoCluster, cluster, strings.Join(endpoints, ","))
		if names := clusters(ctx, cli); len(names) > 0 {
			return nil, fmt.Errorf("%w (it holds: %s): check --cluster", err, strings.Join(names, ", "))
		}
		return nil, fmt.Errorf("%w (it holds no pbfs cluster): check --coordinator and --cluster", err)
	}
	r := &Report{}
	var roster []Seen
	for _, kv := range resp.Kvs {
		switch key := string(kv.Key); {
		case key == k.epoch():
			r.Epoch, _ = strconv.ParseUint(string(kv.Value), 10, 64)
		case key == k.leader():
			var l Leader
			if json.Unmarshal(kv.Value, &l) == nil {
				r.Leader = &l
				if ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(l.LeaseID)); err == nil {
					r.LeaseTTL = ttl.TTL
				}
			}
		case key == k.force():
			var f Forced
			if json.Unmarshal(kv.Value, &f) == nil {
				r.Forced = &f
			}
		case key == k.failover():
			var f Failover
			if json.Unmarshal(kv.Value, &f) == nil {
				r.Failover = &f
			}
		case strings.HasPrefix(key, k.roster()):
			var sn Seen
			if json.Unmarshal(kv.Value, &sn) == nil {
				roster = append(roster, sn)
			}
		case len(key) > len(k.members()) && key[:len(k.members())] == k.members():
			var m Member
			if json.Unmarshal(kv.Value, &m) == nil {
				r.Members = append(r.Members, m)
			}
		}
	}
	sort.Slice(r.Members, func(i, j int) bool { return r.Members[i].Name < r.Members[j].Name })
	r.Lost = lost(roster, r.Members, time.Now())
	r.Degraded = r.degradation()
	return r, nil
}

// Health reports whether the node serves a role (/readyz): its mount's
// report while primary, its backup's while backup, and not ready between
// roles.
func (n *Node) Health() health.Report {
	n.mu.Lock()
	m, b, refused := n.mounted, n.backup, n.refused
	n.mu.Unlock()
	switch {
	case m != nil:
		return m.Health()
	case b != nil:
		return b.Health()
	}
	r := health.Report{Role: health.RoleNone, Problems: []string{"between roles: an election is due or under way (pbfs status --coordinator shows the cluster)"}}
	if refused != "" {
		r.Problems = append(r.Problems, "the last election attempt did not take the term: "+refused)
	}
	return r
}
