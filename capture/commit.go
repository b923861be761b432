package capture

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pbfs/pbfs/journal"
)

// Committer seals the FS's open batches and appends them to the journal:
// on a barrier, when a batch outgrows its size limit, and on a short timer.
// Concurrent barriers share one seal (group commit); a barrier with nothing
// new returns the last seq at once.
type Committer struct {
	fs       *FS
	store    *journal.Store
	log      *slog.Logger
	interval time.Duration
	sem      chan struct{} // one commit at a time

	// held is a sealed batch the journal refused (ENOSPC, say); it is
	// retried before anything newer, so nothing captured is ever dropped.
	held *Sealed
	at   time.Time
	// Failed appends in a row, and when one was last logged: a refusing
	// journal is retried every seal interval, but logged every 10 s.
	failed   int
	loggedAt time.Time
	// holding is whether a refused batch is held, for Run to retry it
	// however long its timer; heldSig tells Run, idle or waiting on its
	// seal timer, that holding turned true (see hold).
	holding atomic.Bool
	heldSig chan struct{}
	// timerWakes counts Run's wake-ups by its timers, for tests.
	timerWakes atomic.Int64

	batches  prometheus.Counter
	bytes    *prometheus.CounterVec
	failures prometheus.Counter
	latency  prometheus.Histogram
}

// NewCommitter joins fs to store. interval is the timer seal period.
func NewCommitter(fs *FS, store *journal.Store, interval time.Duration, reg prometheus.Registerer, log *slog.Logger) *Committer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Committer{
		fs: fs, store: store, log: log, interval: interval, sem: make(chan struct{}, 1), heldSig: make(chan struct{}, 1),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pbfs_journal_batches_total", Help: "Batches appended to the journal.",
		}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pbfs_journal_bytes_total", Help: "Batch bytes by stage: written by the service, coalesced payload, stored (compressed).",
		}, []string{"stage"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pbfs_journal_append_failures_total", Help: "Journal appends that failed and will be retried.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pbfs_journal_commit_seconds", Help: "Time to seal and append a batch.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
	}
	if reg != nil {
		reg.MustRegister(c.batches, c.bytes, c.failures, c.latency)
	}
	return c
}

// Barrier seals everything captured so far and returns once it is in the
// journal, with the seq of the batch that covers it.
func (c *Committer) Barrier(ctx context.Context) (uint64, error) {
	return c.commit(ctx, "barrier")
}

// Held reports how many ops wait in a sealed batch the journal refused.
func (c *Committer) Held() int {
	c.sem <- struct{}{}
	defer func() { <-c.sem }()
	if c.held == nil {
		return 0
	}
	return len(c.held.Ops)
}

// Holding reports whether a sealed batch the journal refused is waiting
// to be retried.
func (c *Committer) Holding() bool { return c.holding.Load() }

// LastSeq returns the seq of the newest journaled batch.
func (c *Committer) LastSeq() uint64 { return c.store.Last().Seq }

func (c *Committer) commit(ctx context.Context, trigger string) (uint64, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-c.sem }()
	for {
		wasHeld := c.held != nil
		if !wasHeld {
			if c.fs.Empty() {
				return c.store.Last().Seq, nil
			}
			start := time.Now()
			s := c.fs.Seal()
			c.fs.m.Seals.WithLabelValues(trigger).Inc()
			if len(s.Ops) == 0 {
				s.Release()
				return c.store.Last().Seq, nil
			}
			c.held, c.at = &s, start
		}
		h, size, raw, err := c.appendSealed(c.held, c.at)
		if err != nil {
			c.hold()
			c.failures.Inc()
			if c.failed++; c.failed == 1 || time.Since(c.loggedAt) >= 10*time.Second {
				c.log.Error("journal append failed; the batch is kept and retried", "err", err, "ops", len(c.held.Ops), "failures", c.failed)
				c.loggedAt = time.Now()
			}
			c.fs.Stuck(true)
			c.fs.WakeWriters() // throttled writers may now be refused instead
			return 0, err
		}
		if c.failed > 0 {
			c.log.Info("journal append succeeded again", "failures", c.failed, "for", time.Since(c.at).Round(time.Millisecond))
			c.failed = 0
			c.fs.Stuck(false)
		}
		c.bytes.WithLabelValues("coalesced").Add(float64(raw))
		c.bytes.WithLabelValues("stored").Add(float64(size))
		c.latency.Observe(time.Since(c.at).Seconds())
		c.held.Release()
		c.held = nil
		c.holding.Store(false)
		if !wasHeld {
			return h.Seq, nil
		}
		// The retried batch is in; go on to seal what was captured after it.
	}
}

// appendSealed stores s's ops as the next batch or, when they are too
// large for one (journal.Split), as a group of batches. If the journal
// refuses one, s keeps only the ops not yet stored, for the retry to
// continue the group. It returns the last batch's header and the stored
// and raw bytes of this call's batches.
func (c *Committer) appendSealed(s *Sealed, at time.Time) (journal.Header, int, int, error) {
	var last journal.Header
	stored, raw := 0, 0
	chunks := journal.Split(s.Ops)
	for i, ops := range chunks {
		h, size, err := c.store.Append(ops, at, s.Written, i < len(chunks)-1)
		if err != nil {
			return last, stored, raw, err
		}
		c.batches.Inc()
		c.bytes.WithLabelValues("written").Add(float64(s.Written))
		last, stored, raw = h, stored+size, raw+int(h.RawLen)
		s.Ops, s.Written = s.Ops[len(ops):], 0
	}
	return last, stored, raw, nil
}
