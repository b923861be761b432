package backup

// A backup's epoch: how far a primary's Hello or resync may raise it, and
// the repair of one no term can take.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// MaxEpochStep bounds how far one primary may raise a backup's epoch
// above the highest it has seen: epochs are issued one above the last
// (promote, elections) or chosen by an operator (mount --epoch). A
// larger step is refused unless the operator accepted that epoch
// (Config.AcceptEpoch) or the coordinator issued it
// (Config.EpochIssued). A token holder raising it step by step
// would need 2^47 Hellos, each a synced write, to reach wire.MaxEpoch.
const MaxEpochStep = 1 << 16

// ErrEpochNotIssued is an EpochIssued hook's answer for an epoch no term
// took.
var ErrEpochNotIssued = errors.New("no term of this epoch was issued")

// askIssuedFor bounds an EpochIssued hook's answer.
const askIssuedFor = 5 * time.Second

// issuedWord is what the EpochIssued hook said of an epoch above the
// backup's (asked: it was asked; err: its refusal or failure).
type issuedWord struct {
	asked bool
	err   error
}

// askIssued asks the EpochIssued hook, if any, about a primary's epoch
// above the backup's, before b.mu is taken: the answer may take a round
// trip to the coordinator.
func (b *Backup) askIssued(ctx context.Context, epoch uint64) issuedWord {
	if b.cfg.EpochIssued == nil || epoch >= wire.MaxEpoch || epoch <= max(b.store.Epoch(), b.fenced.Load()) {
		return issuedWord{}
	}
	ctx, cancel := context.WithTimeout(ctx, askIssuedFor)
	defer cancel()
	return issuedWord{asked: true, err: b.cfg.EpochIssued(ctx, epoch)}
}

// epochRefusal says why a primary of epoch may not be served (a label
// for pbfs_backup_rejected_total and a reason naming the remedy), or
// nothing; the caller holds b.mu. An epoch at or below the backup's is
// the fence's and the stale check's to judge.
func (b *Backup) epochRefusal(epoch uint64, word issuedWord) (string, string) {
	cur := max(b.store.Epoch(), b.fenced.Load())
	switch {
	case cur >= wire.MaxEpoch:
		return "epoch_out_of_range", fmt.Sprintf("this backup holds epoch %d, which no term can take (a Hello stored it before backups refused such epochs): "+
			"restart it with --repair-epoch set to the current primary's epoch", cur)
	case epoch <= cur:
		return "", ""
	case epoch >= wire.MaxEpoch:
		return "epoch_out_of_range", fmt.Sprintf("epoch %d is out of range (below %d): no coordinator or operator issues it", epoch, uint64(wire.MaxEpoch))
	case b.cfg.EpochIssued != nil && !word.asked:
		return "epoch_not_issued", fmt.Sprintf("epoch %d was not checked with the coordinator; the primary retries", epoch)
	case errors.Is(word.err, ErrEpochNotIssued):
		return "epoch_not_issued", fmt.Sprintf("epoch %d: %v: only a primary the coordinator elected starts a term", epoch, word.err)
	case word.err != nil:
		return "epoch_unchecked", fmt.Sprintf("epoch %d could not be checked with the coordinator (%v); the primary retries", epoch, word.err)
	case b.cfg.EpochIssued == nil && epoch-cur > MaxEpochStep && epoch > b.cfg.AcceptEpoch:
		return "epoch_jump", fmt.Sprintf("epoch %d is %d above this backup's %d, and a primary may raise it by at most %d: "+
			"if that epoch is right, restart this backup with --accept-epoch %d", epoch, epoch-cur, cur, MaxEpochStep, epoch)
	}
	return "", ""
}

// refuseEpoch is admit's refusal of an epoch: not STALE_EPOCH, which
// deposes the primary, since a newer term is not what refused it.
func (b *Backup) refuseEpoch(stream backupStream, label, reason string) error {
	return b.refuse(stream, label, reject(replpb.Reject_UNKNOWN, 0, "%s", reason))
}

// repairEpoch puts an epoch no term can take (at or above wire.MaxEpoch), which
// backups before epochRefusal stored from a Hello, back to to
// (Config.RepairEpoch); without to, it says what to do.
func (b *Backup) repairEpoch(to uint64) error {
	cur := b.store.Epoch()
	if cur < wire.MaxEpoch {
		if to > 0 {
			b.log.Debug("the journal's epoch is in range: nothing to repair", "epoch", cur)
		}
		return nil
	}
	if to == 0 {
		b.log.Error("this backup holds an epoch no term can take, which an earlier version stored from a Hello: "+
			"it refuses every primary until it is restarted with --repair-epoch set to the current primary's epoch", "epoch", cur)
		return nil
	}
	if last := b.store.Last().Epoch; last >= wire.MaxEpoch {
		return fmt.Errorf("repair epoch: the journal's batches carry epoch %d too: move the journal aside, and the primary resyncs a new one", last)
	}
	if to >= wire.MaxEpoch {
		return fmt.Errorf("repair epoch %d: want below %d", to, uint64(wire.MaxEpoch))
	}
	if err := b.store.ResetEpoch(to); err != nil {
		return fmt.Errorf("repair epoch: %w", err)
	}
	b.log.Warn("repaired the journal's epoch, which no term could take", "was", cur, "now", to)
	return nil
}
