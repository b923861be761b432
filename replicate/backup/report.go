package backup

import (
	"context"
	"fmt"
	"time"

	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// What a backup says of itself: the Welcome it answers a primary's Hello
// with, and the Report a backup about to be promoted asks its peers for
// (promote.go) through Query.

// welcome describes what the backup holds; the caller holds b.mu.
func (b *Backup) welcome() *replpb.Welcome {
	last := b.store.Last()
	return &replpb.Welcome{
		VolumeId: b.volumeID, DurableSeq: last.Seq, DurableChecksum: last.Checksum,
		AppliedSeq: b.applied.Load(), Epoch: max(b.store.Epoch(), b.fenced.Load()), Stalled: b.stalled.Load(),
		AckNeed: b.policy.Need, Backups: b.policy.Of, Degrade: b.policy.Degrade,
		SparseSums: true,
		RootEntry:  true,
		AllocMap:   true,
		// Targeted resyncs (resync_scope.go).
		ResyncScope: true,
	}
}

// Report answers a backup that is about to be promoted and compares
// itself with the others.
func (b *Backup) Report(context.Context, *replpb.ReportRequest) (*replpb.Welcome, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.welcome(), nil
}

// Peer is another backup's state as Report gives it.
type Peer struct {
	Addr       string
	VolumeID   string
	DurableSeq uint64
	Checksum   uint32
	AppliedSeq uint64
	Epoch      uint64
	Stalled    bool
	Policy     wire.AckPolicy
}

// Query asks the backup at addr what it holds.
func Query(ctx context.Context, addr, token string, tlsFiles wire.TLSFiles) (Peer, error) {
	conn, err := wire.DialGRPC(addr, token, tlsFiles)
	if err != nil {
		return Peer{}, fmt.Errorf("query %s: %w", addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	w, err := replpb.NewReplicationClient(conn).Report(ctx, &replpb.ReportRequest{})
	if err != nil {
		return Peer{}, fmt.Errorf("query %s: %w", addr, err)
	}
	return Peer{Addr: addr, VolumeID: w.VolumeId, DurableSeq: w.DurableSeq, Checksum: w.DurableChecksum, AppliedSeq: w.AppliedSeq,
		Epoch: w.Epoch, Stalled: w.Stalled, Policy: wire.AckPolicy{Need: w.AckNeed, Of: w.Backups, Degrade: w.Degrade}}, nil
}
