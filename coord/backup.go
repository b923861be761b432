package coord

import (
	"context"
	"fmt"
	"time"

	"github.com/pbfs/pbfs/mount"
	"github.com/pbfs/pbfs/replica"
	"github.com/pbfs/pbfs/replicate/backup"
)

// The backup role of a node: a replica that serves until this node wins
// an election, and the member record it keeps up to date.

// serveBackup runs the backup role until this node wins an election
// (true) or ctx ends.
func (n *Node) serveBackup(ctx context.Context) (bool, error) {
	bcfg := n.backupConfig(ctx)
	bcfg.Guarded = true // by Run
	bcfg.Events = n.ev
	n.firstTerm = bcfg.FirstTerm
	// A primary of this node killed before left its mount behind.
	mount.ClearStaleMount(n.cfg.Mount.Mountpoint, n.log)
	r, err := replica.Start(replica.Config{Backup: bcfg, Listen: n.cfg.Listen, Logger: n.log})
	if err != nil {
		return false, err
	}
	b := r.Backup()
	n.setRole("backup", nil, b)
	n.mu.Lock()
	n.backupReg = r.Registry()
	n.mu.Unlock()
	defer func() {
		r.Close()
		n.setRole("", nil, nil)
	}()
	stopForwarding, err := n.startForwarding()
	if err != nil {
		return false, fmt.Errorf("listen on the frontend address to forward it: %w", err)
	}
	defer stopForwarding() // before the plugin takes the address, on promotion
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	go n.publishBackup(pctx, b)
	return n.awaitElection(ctx, b)
}

// publishBackup republishes the backup's state until ctx ends.
func (n *Node) publishBackup(ctx context.Context, b *backup.Backup) {
	t := time.NewTicker(publishEvery)
	defer t.Stop()
	for {
		n.publish(ctx, n.backupMember(b.Status()))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (n *Node) backupMember(st backup.Status) Member {
	n.mu.Lock()
	refused := n.refused
	n.mu.Unlock()
	return Member{Role: "backup", Volume: st.VolumeID, Epoch: st.Epoch, Fenced: st.Fenced, Durable: st.CompleteSeq, Applied: st.AppliedSeq,
		Stalled: st.Stalled, FormerEpoch: st.FormerEpoch, Need: st.Policy.Need, Of: st.Policy.Of, Degrade: st.Policy.Degrade, Refused: refused}
}
