// Package coord runs a pbfs node whose role an etcd cluster decides: it
// serves as a backup until the primary's lease lapses, then the most
// current eligible backup takes the primary's place under a higher epoch,
// runs the promotion hook and replicates to the others; a primary that
// cannot renew its lease stops acknowledging before anyone else can be
// promoted, and rejoins as a backup through a resync. docs/FAILOVER.md
// gives the rules and the timing argument.
package coord

import (
	"encoding/json"
	"path"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The cluster's state in etcd, under a prefix (/pbfs/CLUSTER/):
//
//	epoch            the current term, a decimal; advanced only by the
//	                 election's compare-and-swap
//	leader           Leader, attached to the primary's lease: it vanishes
//	                 when the primary stops renewing it
//	members/NAME     Member, attached to the node's own lease, republished
//	                 several times a second
//	failover/last    Failover, the last change of primary
//	terms/EPOCH      Term, each term's primary and the members it started
//	                 with, written before it serves (terms.go)
//	force            Forced, an operator's order for the vacant term
//	                 (force.go)
type keys struct{ prefix string }

func (k keys) epoch() string             { return path.Join(k.prefix, "epoch") }
func (k keys) leader() string            { return path.Join(k.prefix, "leader") }
func (k keys) members() string           { return path.Join(k.prefix, "members") + "/" }
func (k keys) member(name string) string { return k.members() + name }
func (k keys) failover() string          { return path.Join(k.prefix, "failover", "last") }
func (k keys) force() string             { return path.Join(k.prefix, "force") }
func (k keys) stepdown() string          { return path.Join(k.prefix, "failover", "stepdown") }

// Leader is the primary of the current term.
type Leader struct {
	Name  string    `json:"name"`
	Addr  string    `json:"addr"`
	Proxy string    `json:"proxy,omitempty"` // its frontend, for the other nodes to forward to
	Epoch uint64    `json:"epoch"`
	Since time.Time `json:"since"`
	// TTL is the lease the primary holds, and LeaseID its etcd id.
	TTL     time.Duration `json:"ttl"`
	LeaseID int64         `json:"lease_id"`
}

// Member is one node as it reports itself.
type Member struct {
	Name   string `json:"name"`
	Addr   string `json:"addr"` // where its backup listens
	Proxy  string `json:"proxy,omitempty"`
	Role   string `json:"role"` // "backup", "primary" or "starting"
	Volume string `json:"volume_id,omitempty"`
	Epoch  uint64 `json:"epoch"`
	// Fenced is the epoch the backup refuses primaries of and below: a
	// term that ended, whose primary it acknowledges nothing more.
	Fenced  uint64 `json:"fenced,omitempty"`
	Durable uint64 `json:"durable_seq"`
	Applied uint64 `json:"applied_seq"`
	Stalled bool   `json:"stalled"`
	// FormerEpoch: a deposed primary of that epoch waiting for its
	// resync (elect.go).
	FormerEpoch uint64 `json:"former_primary_epoch,omitempty"`
	Need        uint32 `json:"ack_need"`
	Of          uint32 `json:"ack_of"`
	Degrade     bool   `json:"degrade,omitempty"`
	// Refused is why this backup did not take the vacant term at its
	// last election attempt ("" once a primary serves).
	Refused string    `json:"refused,omitempty"`
	At      time.Time `json:"at"`
}

// Failover records a change of primary.
type Failover struct {
	From  string        `json:"from"`
	To    string        `json:"to"`
	Epoch uint64        `json:"epoch"`
	At    time.Time     `json:"at"`
	Took  time.Duration `json:"took"` // from the lapse noticed to serving
	// Outage is what clients waited: from the old primary's last lease
	// renewal (its step-down, if it stepped down; else a lease TTL before
	// its lapse was seen) to the first write the new primary acknowledged.
	// 0 until that write.
	Outage time.Duration `json:"outage,omitempty"`
	// Forced: the new primary took the term by an operator's order,
	// against the election's rule (force.go).
	Forced bool `json:"forced,omitempty"`
}

func encode(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// decodeMembers decodes member records, skipping any it cannot read.
func decodeMembers(kvs []*mvccpb.KeyValue) []Member {
	var out []Member
	for _, kv := range kvs {
		var m Member
		if json.Unmarshal(kv.Value, &m) == nil {
			out = append(out, m)
		}
	}
	return out
}
