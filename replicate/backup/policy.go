package backup

import (
	"encoding/binary"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// The ack policy a backup keeps: the last one a primary announced, which
// promotion goes by (promote.go).

// policyKey is the backup's journal metadata key for the last AckPolicy.
var policyKey = journal.KeyAckPolicy.Name

// encodePolicy is p as the backup keeps it under policyKey.
func encodePolicy(p wire.AckPolicy) []byte {
	b := binary.BigEndian.AppendUint32(nil, p.Need)
	b = binary.BigEndian.AppendUint32(b, p.Of)
	if p.Degrade {
		return append(b, 1)
	}
	return append(b, 0)
}

// decodePolicy reads what encodePolicy wrote; the zero policy if b is
// not one.
func decodePolicy(b []byte) wire.AckPolicy {
	if len(b) != 9 {
		return wire.AckPolicy{}
	}
	return wire.AckPolicy{Need: binary.BigEndian.Uint32(b), Of: binary.BigEndian.Uint32(b[4:]), Degrade: b[8] == 1}
}

// notePolicy keeps the policy a primary announced; the caller holds b.mu.
func (b *Backup) notePolicy(h *replpb.Hello) error {
	p := wire.AckPolicy{Need: h.AckNeed, Of: h.Backups, Degrade: h.Degrade}
	if p == b.policy || !p.Known() {
		return nil
	}
	if err := b.store.SetMeta(policyKey, encodePolicy(p)); err != nil {
		return err
	}
	b.policy = p
	return nil
}
