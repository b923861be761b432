package backup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// A promotion applies what the backup's journal holds before the volume
// serves: those batches include acknowledged writes. A batch the backup
// cannot apply (applyblock.go) used to hold the promotion for good; now
// it waits while the volume makes progress, and gives up, naming the
// batch, why and the remedy, once a batch has held it up for
// promoteStuck with nothing applied.

// promoteStuck bounds how long a promotion waits on a batch the backup
// cannot apply, with nothing applied meanwhile.
var promoteStuck = 10 * time.Second

// promoteProgressEvery is how often a promotion that waits says how far
// the volume is.
const promoteProgressEvery = 2 * time.Second

// errApplyStuck refuses a promotion whose volume cannot take every batch
// its journal holds.
type errApplyStuck struct {
	block    *applyBlock
	from, to uint64
}

func (e *errApplyStuck) Error() string {
	which := fmt.Sprintf("batch %d", e.from)
	if e.to > e.from {
		which = fmt.Sprintf("batches %d to %d", e.from, e.to)
	}
	return fmt.Sprintf("the volume lacks acknowledged writes (%s): this backup %s. "+
		"Let the apply go through (the backup retries it) and promote again, or promote a backup that applied them "+
		"(pbfs status --journal shows each one's state); forcing the promotion loses them", which, e.block)
}

// waitVolume waits until the volume holds seq, saying how far it is
// every promoteProgressEvery; it fails if the backup stalls, or once a
// batch it cannot apply has held it for promoteStuck (*errApplyStuck).
func (b *Backup) waitVolume(ctx context.Context, seq uint64, log *slog.Logger) error {
	last, moved, said := b.applied.Load(), time.Now(), time.Now()
	for {
		changed := b.appliedChanged()
		applied := b.applied.Load()
		switch {
		case applied >= seq:
			return nil
		case b.stalled.Load():
			return errors.New("backup stalled: apply failed")
		case applied != last:
			last, moved = applied, time.Now()
		}
		bl := b.blocked.Load()
		if bl != nil && time.Since(moved) >= promoteStuck {
			return &errApplyStuck{block: bl, from: applied + 1, to: seq}
		}
		if time.Since(said) >= promoteProgressEvery {
			said = time.Now()
			words, _ := b.blockedWords()
			log.Info("promote: applying what the journal holds", "applied", applied, "of", seq, "blocked", words)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-time.After(100 * time.Millisecond):
		}
	}
}
