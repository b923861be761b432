package mount

import (
	"context"
	"fmt"
	"time"

	"github.com/pbfs/pbfs/journal"
)

// A barrier's path: seal what capture holds, wait for the resync gate
// and the ack set, fall back to the primary's own disk when no backup
// holds the batch, and ask the coordinator's lease last.

// Barrier seals everything captured so far into the journal and returns
// its seq once that batch, and every batch before it, is durable on the
// ack set. With nothing new it returns the last seq without sealing, and
// without a network round trip once that seq is acked.
func (m *Mount) Barrier(ctx context.Context) (uint64, error) {
	start := time.Now()
	// What the service stored through shared mappings reaches the
	// capture only when the kernel writes it back: make it now.
	if err := m.srv.Flush(ctx); err != nil {
		return 0, fmt.Errorf("barrier: %w", err)
	}
	seq, err := m.commit(ctx)
	if err == nil {
		m.timings.barrier.Observe(time.Since(start).Seconds())
	}
	return seq, err
}

// fsyncBarrier is the barrier a replicated fsync takes. It skips the
// flush round: the kernel has written the fsynced file's dirty pages back
// (as WRITEs, answered) before it sends the FSYNC, and a mapping of
// another file is no more durable after a local fsync of this one, so the
// fsync means what it would on a plain directory, with the backups as
// the disk.
func (m *Mount) fsyncBarrier(ctx context.Context) error {
	_, err := m.commit(ctx)
	return err
}

// commit seals what was captured and waits until the ack set holds it.
func (m *Mount) commit(ctx context.Context) (uint64, error) {
	start := time.Now()
	seq, err := m.commitWait(ctx)
	if err == nil {
		m.latency.add(time.Since(start))
	}
	return seq, err
}

func (m *Mount) commitWait(ctx context.Context) (uint64, error) {
	seq, err := m.committer.Barrier(ctx)
	if err == nil {
		var deposed <-chan struct{}
		if m.primary != nil {
			deposed = m.primary.Deposed()
		}
		err = m.ahead.wait(ctx, m.runDone, deposed)
	}
	if err != nil {
		return seq, err
	}
	acks := 0
	if m.primary != nil {
		if acks, err = m.primary.Wait(ctx, seq); err != nil {
			return 0, err
		}
	}
	if acks == 0 {
		// No backup holds the batch (none configured, --ack none, or the
		// ack set only of backups still joining): a barrier still means
		// durable somewhere, here.
		start := time.Now()
		if err := m.store.Sync(); err != nil {
			return 0, fmt.Errorf("barrier %d: %w", seq, err)
		}
		m.timings.sync.Observe(time.Since(start).Seconds())
	}
	// The last word: a primary whose term may be over must not
	// acknowledge anything (docs/FAILOVER.md).
	if lease := m.cfg.Lease; lease != nil {
		if err := lease(ctx); err != nil {
			return 0, fmt.Errorf("barrier %d: %w", seq, err)
		}
	}
	for cur := m.acked.Load(); seq > cur && !m.acked.CompareAndSwap(cur, seq); cur = m.acked.Load() {
	}
	if seq > m.startSeq {
		m.firstAckOnce.Do(func() { close(m.firstAck) })
	}
	return seq, nil
}

// FirstAck is closed once the mount has acknowledged its first write: a
// barrier returned that covers a batch this mount journaled.
func (m *Mount) FirstAck() <-chan struct{} { return m.firstAck }

// keepAcked persists, every second, the newest seq a barrier returned:
// if this primary is deposed, a resync keeps aside only what it wrote
// after that (its unacknowledged suffix). Unsynced: a stale value only
// keeps more aside.
func (m *Mount) keepAcked(ctx context.Context) {
	defer m.bg.Done()
	var saved uint64
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		if v := m.acked.Load(); v != saved {
			if err := m.store.SetMetaUint(journal.KeyAcked.Name, v); err == nil {
				saved = v
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}
