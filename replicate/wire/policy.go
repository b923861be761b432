package wire

// MaxEpoch bounds the epochs a term may take (mount --epoch, promote
// --epoch), and so the epoch a primary's Hello carries: far above any a
// cluster reaches by promotions, and far enough below 2^64 that the next
// term's epoch never wraps round to 0.
const MaxEpoch = 1 << 63

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
