package primary

import (
	"context"
	"time"

	"github.com/pbfs/pbfs/internal/events"
)

// The degrade policy (--degrade-after): availability instead of blocking
// on a lagging backup, but never an ack set left empty.

// watch implements the degrade policy: a backup that has been behind the
// journal for degradeAfter leaves the ack set and is marked stale (it lacks
// acknowledged batches, so it must not be promoted) until it has caught up,
// unless it is the last backup in the ack set (lastInAckSet). Every
// degraded second is logged and counted.
func (p *Primary) watch(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	lagSince := map[*Shipper]time.Time{}
	lastLog := map[*Shipper]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			last := p.store.Last().Seq
			for _, s := range p.list() {
				if s.acked.Load() >= last && !s.stalled.Load() {
					lagSince[s] = time.Time{}
					if s.degraded.Swap(false) {
						s.degradedSince.Store(0)
						p.log.Info("backup caught up; back in the ack set", "backup", s.addr, "seq", last)
						p.cfg.Events.Emit(events.KindRejoined, "backup", s.addr, "seq", last)
						p.notify()
					}
					continue
				}
				if lagSince[s].IsZero() {
					lagSince[s] = now
				}
				if !s.degraded.Load() && now.Sub(lagSince[s]) >= p.degradeAfter && p.lastInAckSet(s) {
					if now.Sub(lastLog[s]) >= 10*time.Second {
						lastLog[s] = now
						p.log.Warn("backup lags, but it is the last one in the ack set: barriers wait for it (--degrade-after never empties the ack set)",
							"backup", s.addr, "behind_for", now.Sub(lagSince[s]).Round(time.Second), "acked_seq", s.acked.Load(), "last_seq", last)
					}
				} else if !s.degraded.Load() && now.Sub(lagSince[s]) >= p.degradeAfter {
					s.degraded.Store(true)
					s.degradedSince.Store(now.UnixNano())
					p.log.Warn("backup dropped from the ack set: it is stale and must not be promoted without a resync",
						"backup", s.addr, "behind_for", now.Sub(lagSince[s]).Round(time.Millisecond), "acked_seq", s.acked.Load(), "last_seq", last)
					p.cfg.Events.Emit(events.KindDegraded, "backup", s.addr, "acked_seq", s.acked.Load(), "last_seq", last)
					p.notify()
				}
				if s.degraded.Load() {
					p.m.degraded.WithLabelValues(s.addr).Add(0.1)
					if now.Sub(lastLog[s]) >= stillDownEvery {
						lastLog[s] = now
						p.log.Warn("degraded: replicating without a backup", "backup", s.addr,
							"behind_for", now.Sub(lagSince[s]).Round(time.Second), "acked_seq", s.acked.Load(), "last_seq", last)
					}
				}
			}
		}
	}
}

// lastInAckSet reports whether dropping s would leave the ack set empty,
// or smaller than MinBackups. The degrade policy never takes that one out:
// with no backup in the ack set, barriers were acknowledged on the
// primary's disk alone, and a promoted backup (none of them could know it
// had been dropped) silently lacked them. Barriers wait for it instead,
// as without --degrade-after.
func (p *Primary) lastInAckSet(s *Shipper) bool {
	others := 0
	for _, o := range p.list() {
		if o != s && o.counts() && !o.joining.Load() {
			others++
		}
	}
	return others < max(1, p.cfg.MinBackups)
}
