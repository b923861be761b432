package replicate

import (
	"encoding/binary"

	"github.com/pbfs/pbfs/journal"
)

// AckPolicy is the ack policy a primary announces in its Hello: a barrier
// returns once Need of the Of backups hold its batch, and with Degrade a
// lagging backup may be dropped from the ack set. A backup keeps the last
// one it saw: promotion needs it to judge whether this backup holds every
// acknowledged batch (docs/FAILOVER.md).
type AckPolicy struct {
	Need, Of uint32
	Degrade  bool
}

// Known reports whether a primary ever announced a policy.
func (p AckPolicy) Known() bool { return p.Of > 0 }

// policyKey is the backup's journal metadata key for the last AckPolicy.
var policyKey = journal.KeyAckPolicy.Name

func (p AckPolicy) encode() []byte {
	b := binary.BigEndian.AppendUint32(nil, p.Need)
	b = binary.BigEndian.AppendUint32(b, p.Of)
	if p.Degrade {
		return append(b, 1)
	}
	return append(b, 0)
}

func decodePolicy(b []byte) AckPolicy {
	if len(b) != 9 {
		return AckPolicy{}
	}
	return AckPolicy{Need: binary.BigEndian.Uint32(b), Of: binary.BigEndian.Uint32(b[4:]), Degrade: b[8] == 1}
}
