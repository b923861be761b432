package primary

import (
	"context"
	"slices"

	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/replicate/wire"
)

// A primary's backups can change while it runs (pbfs node adds the
// members its coordinator lists): a backup added later joins out of the
// ack set, as a degraded one is, and enters it once it holds what a
// barrier waits for, so a newcomer that must first be resynced does not
// hold every barrier meanwhile. Every session's Hello announces the ack
// policy over the backups known then.

// A backup added while the primary runs is out of the ack set until it
// holds every batch a barrier has acknowledged, and is told so: announce
// gives it the degrade flag, with which an election waits for every
// backup's report, since its own proves nothing about what the ack set
// acknowledged without it. Told Need of Of counting itself, a joining
// backup took itself alone (Of-Need+1 = 1 with --ack all) for proof, and
// was elected without what the others had acknowledged meanwhile.

// joinIfCaughtUp puts a joining backup in the ack set once it durably
// holds every batch journaled so far, without waiting for a barrier to
// notice (Primary.Wait also admits one that holds the seq it waits for):
// an idle primary's status said "joining" for a backup long caught up.
func (s *Shipper) joinIfCaughtUp() {
	if s.joining.Load() && s.onJoin != nil {
		s.onJoin(s, s.store.Last().Seq)
	}
}

// join puts s in the ack set if it holds seq and every seq a barrier has
// returned for, then tells it the ack set's policy with a new session's
// Hello. Under p.mu with acknowledged: a barrier that counted the set
// before the join counts again, so none returns without a backup that has
// joined, and none of the set's acknowledged batches is missing from it.
func (p *Primary) join(s *Shipper, seq uint64) {
	p.mu.Lock()
	ok := s.joining.Load() && s.counts() && s.acked.Load() >= max(seq, p.ackedMax)
	if ok {
		s.joining.Store(false)
		p.joinGen++
	}
	p.mu.Unlock()
	if !ok {
		return
	}
	s.log.Info("backup caught up; in the ack set", "seq", s.acked.Load())
	p.announce() // and a new session tells it the ack set's policy
}

// Every backup goes by the policy it was last told when an election
// counts reports, and it is told a new one only by a new session's Hello:
// one in the ack set when another joined under --ack majority held
// {1 of 1} while barriers were acknowledged by {1 of 2}, and was elected
// alone without what the other had acknowledged. So a barrier returns
// only when no backup lacking its batch could be elected by the rule it
// holds (quorum), and announce tells every backup a changed policy at
// once.

// quorum is how many fresh reports s's own election rule asks for
// (coord's eligible), by the policy it last confirmed. Not confirmed yet:
// 1 for a backup a dynamic primary's term started with (it may hold
// {1 of 1} from the last; a fixed list's backups are taken to hold the
// policy the flags give, Start); none for one added while the
// primary ran, which holds no batch of this term before its first Hello
// (counted, a member whose record outlived it held every barrier until it
// was back).
func (s *Shipper) quorum() int {
	p := s.confirmed.Load()
	switch {
	case (p == nil || !p.Known()) && s.added:
		return 1 << 30
	case p == nil || !p.Known():
		return 1
	case p.Degrade:
		return int(p.Of)
	}
	return int(p.Of - p.Need + 1)
}

// electable counts, over the n backups, those holding a batch (add), and
// tells whether they are enough that none of the n-holders lacking it can
// be elected (safe): by its quorum of k reports it needs k-1 others, and
// there must be fewer non-holders than k.
type electable struct{ n, holders, floor int }

func (e *electable) add(s *Shipper, holds bool) {
	if holds {
		e.holders++
	} else {
		e.floor = max(e.floor, e.n-s.quorum()+1)
	}
}

func (e *electable) safe() bool { return e.holders >= e.floor }

// acknowledged records seq as acknowledged, unless a backup joined the
// ack set since gen was read: the caller then counts again.
func (p *Primary) acknowledged(gen, seq uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.joinGen != gen {
		return false
	}
	p.ackedMax = max(p.ackedMax, seq)
	return true
}

// mustResync makes s resync before it streams, and counts it among the
// backups ResyncAll waits for: AllResynced runs once every one counted
// has been resynced. A primary that started with no backup waits for the
// first one added. Called under smu, or before the shippers run.
func (p *Primary) mustResync(s *Shipper) {
	p.resyncLeft = max(p.resyncLeft, 0) + 1
	s.force.Store(true)
	s.onResync = func() {
		p.smu.Lock()
		p.resyncLeft--
		done := p.resyncLeft == 0
		p.smu.Unlock()
		if done && p.cfg.AllResynced != nil {
			p.cfg.AllResynced()
		}
	}
}

// list returns the current backups.
func (p *Primary) list() []*Shipper {
	p.smu.Lock()
	defer p.smu.Unlock()
	return slices.Clone(p.shippers)
}

// announce sets the ack policy each shipper's next Hello carries.
func (p *Primary) announce() {
	p.smu.Lock()
	defer p.smu.Unlock()
	n := len(p.shippers)
	// Need above Of (MinBackups not met) would tell an election nothing
	// more: while it is, no barrier returns.
	pol := wire.AckPolicy{Need: uint32(min(p.needOf(n), n)), Of: uint32(n), Degrade: p.degradeAfter > 0}
	joining := pol
	joining.Degrade = true // see above
	for _, s := range p.shippers {
		next := &pol
		if s.joining.Load() {
			next = &joining
		}
		if old := s.policy.Swap(next); old != nil && *old != *next && !s.joining.Load() {
			// Tell it at once: until it has confirmed the new policy,
			// barriers go by the one it holds (quorum).
			s.rehello()
		}
	}
}

// Backups lists the addresses the primary ships to.
func (p *Primary) Backups() []string {
	var out []string
	for _, s := range p.list() {
		out = append(out, s.addr)
	}
	return out
}

// AddBackup starts shipping to one more backup, out of the ack set until
// it has caught up. Adding a known address does nothing.
func (p *Primary) AddBackup(addr string) error {
	if err := sameBackupTwice(append(p.Backups(), addr)); err != nil {
		return err
	}
	p.smu.Lock()
	for _, s := range p.shippers {
		if s.addr == addr {
			p.smu.Unlock()
			return nil
		}
	}
	cfg := p.cfg
	s, err := newShipper(addr, cfg.Token, cfg.TLS, cfg.VolumeID, cfg.Store, cfg.Snapshots, p.m, p.notify, p.log)
	if s != nil {
		s.memory, s.onDeposed, s.onJoin, s.ev = p.memory, p.depose, p.join, cfg.Events
	}
	if err != nil {
		p.smu.Unlock()
		return err
	}
	s.joining.Store(true)
	s.added = true
	p.shippers = append(p.shippers, s)
	if p.resyncLeft != 0 {
		// The volume is still ahead of the journal: streamed from the
		// journal alone, the newcomer would lack what the journal lacks.
		p.mustResync(s)
	}
	p.smu.Unlock()
	p.announce()
	p.log.Info("backup added; it joins the ack set once caught up", "backup", addr)
	cfg.Events.Emit(events.KindBackupAdded, "backup", addr)
	p.startShipper(s)
	p.notify()
	return nil
}

// startShipper runs s until the primary closes or s is removed.
func (p *Primary) startShipper(s *Shipper) {
	ctx, cancel := context.WithCancel(p.ctx)
	s.stop = cancel
	p.wg.Add(1)
	go func() { defer p.wg.Done(); s.run(ctx) }()
}
