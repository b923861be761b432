package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Trim deletes the batches below upTo that were sealed before olderThan,
// oldest first, and reports how many it deleted. upTo itself stays: it is
// what a backup that holds upTo proves its history with (its checksum), and
// the newest batch always stays, anchoring the chain for the next append.
func (s *Store) Trim(upTo uint64, olderThan time.Time) (int, error) {
	last := s.Last().Seq
	if last == 0 {
		return 0, nil
	}
	if upTo == 0 {
		return 0, nil
	}
	upTo = min(upTo-1, last-1)
	var doomed []uint64
	err := s.Scan(0, func(seq uint64, enc []byte) error {
		if seq > upTo {
			return errStop
		}
		h, err := DecodeHeader(enc)
		if err == nil && !h.Created.Before(olderThan) {
			return errStop
		}
		doomed = append(doomed, seq)
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return 0, fmt.Errorf("trim journal: %w", err)
	}
	if len(doomed) == 0 {
		return 0, nil
	}
	return s.bl.trim(doomed[len(doomed)-1] + 1), nil
}

// First returns the oldest stored seq, 0 if the journal is empty.
func (s *Store) First() uint64 {
	first, _ := s.bl.bounds()
	return first
}

// CollectGarbage rewrites Badger's value log files that metadata updates
// left mostly empty, so the disk space comes back. (Trimmed batches give
// theirs back with their segments.)
func (s *Store) CollectGarbage() (int, error) {
	n := 0
	for {
		err := s.db.RunValueLogGC(0.5)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("journal garbage collection: %w", err)
		}
		n++
	}
}

// Retention trims a journal on a schedule: batches at or below SafeSeq()
// (what every backup holds) and older than Window, or of any age while
// the journal is short of space (Store.Tight), and, to bound the disk
// when a backup is gone for good, any batch older than MaxAge.
type Retention struct {
	Store   *Store
	Window  time.Duration
	MaxAge  time.Duration // 0: no limit
	SafeSeq func() uint64
	Every   time.Duration
	Logger  *slog.Logger
	// Trimmed, if set, is called with the number of batches each pass deleted.
	Trimmed func(int)
}

// Run trims until ctx ends.
func (r *Retention) Run(ctx context.Context) {
	if r.Every <= 0 {
		r.Every = 10 * time.Second
	}
	t := time.NewTicker(r.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r.pass(now)
		}
	}
}

func (r *Retention) pass(now time.Time) {
	window := r.Window
	if r.Store.Tight() {
		// Short of space: what every backup holds goes now, rather than
		// have the journal refuse batches until the window passes.
		window = 0
	}
	n, err := r.Store.Trim(r.SafeSeq(), now.Add(-window))
	if window == 0 && n > 0 && r.Window > 0 {
		r.Logger.Warn("journal short of space: trimmed batches every backup holds before their retention window", "batches", n, "window", r.Window)
	}
	if err == nil && r.MaxAge > 0 {
		var m int
		m, err = r.Store.Trim(^uint64(0), now.Add(-r.MaxAge))
		if m > 0 {
			r.Logger.Warn("trimmed batches a backup has not acked: it will need a resync", "batches", m, "max_age", r.MaxAge)
		}
		n += m
	}
	if err != nil {
		r.Logger.Error("journal retention", "err", err)
		return
	}
	if n > 0 {
		if r.Trimmed != nil {
			r.Trimmed(n)
		}
		if _, err := r.Store.CollectGarbage(); err != nil {
			r.Logger.Warn("journal garbage collection", "err", err)
		}
	}
}
