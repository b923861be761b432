package primary

import (
	"sync/atomic"
	"time"

	"github.com/pbfs/pbfs/internal/status"
)

// How far a resync to one backup is, in bytes: of the regular files' bytes
// it compares (the snapshot's, or the targeted resync's scope), how many
// the primary has read and checksummed so far, including the file it is
// reading; and the bytes of blocks the backup lacked, sent. Both only
// grow during one resync; the next one starts again from 0.
type resyncProgress struct {
	started atomic.Int64 // unix ns; 0: none under way
	total   atomic.Uint64
	done    atomic.Uint64
	sent    atomic.Uint64
	// last is the latest finished resync's, for status to report after
	// it ended: one may end between two looks at a mount's status.
	last atomic.Pointer[status.ResyncProgress]
}

// begin starts counting a resync of total bytes.
func (p *resyncProgress) begin(total uint64) {
	p.total.Store(total)
	p.done.Store(0)
	p.sent.Store(0)
	p.started.Store(time.Now().UnixNano())
}

// finish records the resync under way as the latest finished one, every
// byte compared.
func (p *resyncProgress) finish() {
	if r := p.snapshot(); r != nil {
		r.Bytes, r.Left = r.TotalBytes, 0
		p.last.Store(r)
	}
}

// advance raises done to n, never lowering it.
func (p *resyncProgress) advance(n uint64) {
	for cur := p.done.Load(); n > cur && !p.done.CompareAndSwap(cur, n); cur = p.done.Load() {
	}
}

// snapshot reads p, nil when no resync is under way.
func (p *resyncProgress) snapshot() *status.ResyncProgress {
	started := p.started.Load()
	if started == 0 {
		return nil
	}
	el := time.Since(time.Unix(0, started))
	r := &status.ResyncProgress{Bytes: p.done.Load(), TotalBytes: p.total.Load(), SentBytes: p.sent.Load(), Elapsed: el}
	r.Bytes = min(r.Bytes, r.TotalBytes)
	if s := el.Seconds(); s > 0 {
		r.Rate = float64(r.Bytes) / s
	}
	if r.Rate > 0 && r.Bytes > 0 {
		r.Left = time.Duration(float64(r.TotalBytes-r.Bytes) / r.Rate * float64(time.Second))
	}
	return r
}
