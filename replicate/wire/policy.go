package wire

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
