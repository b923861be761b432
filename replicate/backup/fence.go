package backup

import (
	"context"
	"fmt"
	"time"

	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
)

// Fencing ends a term at the backups. A coordinator that sees a term end
// (its leader key gone) fences every backup at that term's epoch before
// their reports are counted: from then on the backup refuses every
// primary of that epoch or below (its Hello, the batches of a session
// already admitted, a resync), so an old primary whose own clock still
// says it holds its lease gathers no ack from it, and its barriers fail
// with ErrDeposed. A report made after the fence therefore holds every
// batch this backup will ever acknowledge to that term, whatever the
// clocks or the coordinator's lease expiry did (docs/FAILOVER.md).

// fencedKey is the journal metadata that keeps the fence across restarts.
var fencedKey = journal.KeyFenced.Name

// formerPrimaryKey marks a journal that served a primary, with that
// primary's epoch, until the resync that makes it a backup's
// (Status.FormerEpoch).
var formerPrimaryKey = journal.KeyFormerPrimary.Name

// Fence makes the backup refuse every primary of epoch or below, durably.
// It returns once no ack to such a primary can follow: batches acked as
// received (ack level memory) are stored first, waiting up to
// keepReceivedFor for them, so that a Status read after Fence holds every
// batch this backup acknowledged to them. Fencing an epoch at or below the
// current fence does nothing.
func (b *Backup) Fence(ctx context.Context, epoch uint64) error {
	b.recvMu.Lock()
	if epoch <= b.fenced.Load() {
		b.recvMu.Unlock()
		return nil
	}
	b.fencing = max(b.fencing, epoch) // no more acks as received
	want := b.recvAcked
	b.recvMu.Unlock()
	deadline := time.Now().Add(keepReceivedFor)
	for b.store.Last().Seq < want && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("fence epoch %d: %w", epoch, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if last := b.store.Last().Seq; last < want {
		// Their stream failed before they came out of it (keepReceived
		// said so): the primary resends them to a live session, but this
		// report cannot hold them. Ack level memory survives one
		// machine's loss, not a stream's failure and then the primary's.
		b.log.Error("fenced without batches acked as received: their stream failed before they were stored", "durable_seq", last, "acked_seq", want)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if epoch <= b.fenced.Load() {
		return nil // a concurrent Fence went as far
	}
	if err := b.store.SetMetaUint(fencedKey, epoch); err != nil {
		return fmt.Errorf("fence epoch %d: %w", epoch, err)
	}
	b.fenced.Store(epoch)
	b.m.fenced.Set(float64(epoch))
	if b.active != nil && b.active.epoch <= epoch {
		b.active.cancel()
		b.active = nil
	}
	b.log.Info("fenced: primaries of this epoch or below are refused from now on", "epoch", epoch, "durable_seq", b.store.Last().Seq)
	b.cfg.Events.Emit(events.KindFenced, "epoch", epoch, "durable_seq", b.store.Last().Seq)
	return nil
}

// fencedOut reports whether a primary of epoch is fenced out: the
// batches of its session are refused (store1).
func (b *Backup) fencedOut(epoch uint64) bool {
	f := b.fenced.Load()
	return f > 0 && epoch <= f
}

// fencingOut reports whether a primary of epoch is fenced out or being
// fenced out: a new session or resync of it is refused (admit,
// beginResync). While a Fence waits for the batches its session acked as
// received, that session may still store them, but the primary may not
// replace it with a new one, which would drop them.
func (b *Backup) fencingOut(epoch uint64) bool {
	f := b.fenceFloor()
	return f > 0 && epoch <= f
}

// fenceFloor is the epoch the backup is fenced at or being fenced at.
func (b *Backup) fenceFloor() uint64 {
	b.recvMu.Lock()
	defer b.recvMu.Unlock()
	return max(b.fencing, b.fenced.Load())
}

// refuseFenced is the refusal of a fenced-out primary.
func (b *Backup) refuseFenced(epoch uint64) *replpb.BackupMsg {
	f := b.fenceFloor()
	return reject(replpb.Reject_STALE_EPOCH, f, "epoch %d ended: this backup was fenced at epoch %d, and this primary was deposed", epoch, f)
}

// mayAckReceived reports whether batches of a session of epoch may be
// acked as received, and notes seq as acked if so.
func (b *Backup) mayAckReceived(epoch, seq uint64) bool {
	b.recvMu.Lock()
	defer b.recvMu.Unlock()
	if f := max(b.fencing, b.fenced.Load()); f > 0 && epoch <= f {
		return false
	}
	b.recvAcked = max(b.recvAcked, seq)
	return true
}

// newSessionReceived forgets what an earlier session acked as received:
// a newer session replaced it, and stores nothing of its.
func (b *Backup) newSessionReceived() {
	b.recvMu.Lock()
	b.recvAcked = 0
	b.recvMu.Unlock()
}
