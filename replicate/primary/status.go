package primary

import (
	"errors"
	"fmt"
	"time"

	"github.com/pbfs/pbfs/internal/status"
	"github.com/pbfs/pbfs/journal"
)

// What a primary reports of its backups: pbfs status, the control socket,
// the coordinator's member records.

// AckSummary says in one line what a barrier needs now: how many acks,
// of how many backups in the ack set, under which flags, and whether
// barriers wait for a backup to join.
func (p *Primary) AckSummary() string {
	in := 0
	for _, s := range p.list() {
		if s.counts() && !s.joining.Load() {
			in++
		}
	}
	need := p.needOf(in)
	flags := "--ack " + p.policy
	if p.cfg.MinBackups > 0 {
		flags += fmt.Sprintf(", --min-backups %d", p.cfg.MinBackups)
	}
	out := fmt.Sprintf("%d of the %d backups in the ack set (%s)", need, in, flags)
	switch {
	case need > in:
		out += ": barriers wait until more backups join"
	case need == 0:
		out += ": barriers are durable on this primary's disk alone"
	}
	return out
}

// AddLag fills in each lagging backup's lag in bytes and age, which reads
// the journal: for an operator's status, not for periodic callers.
func (p *Primary) AddLag(sts []status.Backup) {
	for i := range sts {
		_, sts[i].LagBytes, sts[i].LagBytesAtLeast, sts[i].LagAge = p.lag(sts[i].AckedSeq)
	}
}

// lagScan bounds the batches a status reads to add up a backup's lag.
const lagScan = 2000

// lag adds up what a backup that holds acked lacks of the journal.
func (p *Primary) lag(acked uint64) (n uint64, bytes int64, atLeast bool, age time.Duration) {
	last := p.store.Last().Seq
	if acked >= last {
		return 0, 0, false, 0
	}
	n = last - acked
	scanned := 0
	p.store.Scan(acked+1, func(seq uint64, enc []byte) error {
		if scanned == 0 {
			if h, err := journal.DecodeHeader(enc); err == nil {
				age = time.Since(h.Created)
			}
		}
		bytes += int64(len(enc))
		if scanned++; scanned >= lagScan {
			atLeast = seq < last
			return errStopScan
		}
		return nil
	})
	return n, bytes, atLeast, age
}

var errStopScan = errors.New("enough")

// Status lists the backups.
func (p *Primary) Status() []status.Backup {
	var out []status.Backup
	for _, s := range p.list() {
		st := status.Backup{Addr: s.addr, Up: s.up.Load(), AckedSeq: s.acked.Load(), AppliedSeq: s.applied.Load(), Resyncs: s.resyncsDone.Load(),
			Stale: s.stale.Load() || s.degraded.Load() || s.stalled.Load() || s.joining.Load(), Degraded: s.degraded.Load(), Stalled: s.stalled.Load(),
			State: s.describe(0), Resyncing: s.resyncing.Load()}
		st.LastResync = s.resyncProg.last.Load()
		if st.Resyncing {
			if st.Resync = s.resyncProg.snapshot(); st.Resync != nil {
				st.ResyncPercent = st.Resync.Percent()
			}
		}
		if last := p.store.Last().Seq; last > st.AckedSeq {
			st.LagBatches = last - st.AckedSeq
		}
		if bl := s.blocked.Load(); bl != nil {
			st.ApplyBlocked, st.ApplyBlockedSeq = bl.words, bl.seq
		}
		if since := s.degradedSince.Load(); since > 0 {
			st.DegradedFor = time.Since(time.Unix(0, since))
		}
		out = append(out, st)
	}
	return out
}

// Problems says why a barrier would not return now, one line each with
// the remedy: fewer backups of the ack set can hold a batch (up, not
// stalled, stale or degraded) than the ack policy needs. None: a barrier
// returns once the backups that are up hold its batch.
func (p *Primary) Problems() []string {
	select {
	case <-p.deposed:
		return []string{"deposed: a backup refused this primary for a newer one; stop it and rejoin as a backup (docs/FAILOVER.md)"}
	default:
	}
	shippers := p.list()
	in, able := 0, 0
	var out []string
	for _, s := range shippers {
		if s.degraded.Load() || s.joining.Load() {
			continue
		}
		in++
		if s.up.Load() && s.counts() && !s.stale.Load() {
			able++
		}
	}
	need := p.needOf(in)
	if able >= need {
		return nil
	}
	out = append(out, fmt.Sprintf("barriers wait: %d of the backups in the ack set can hold a batch, %d needed (%s)", able, need, p.AckSummary()))
	for _, s := range shippers {
		if !s.up.Load() || !s.counts() || s.stale.Load() {
			out = append(out, fmt.Sprintf("backup %s: %s; start it or give it room (pbfs status names why), or let the ack policy go on without it (--degrade-after)", s.addr, s.describe(0)))
		}
	}
	return out
}
