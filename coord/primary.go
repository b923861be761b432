package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pbfs/pbfs/mount"
	"github.com/pbfs/pbfs/replica"
	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/primary"
)

// servePrimary serves the term this node won until its lease lapses (it
// is deposed, and becomes a backup again) or ctx ends (it steps down).
func (n *Node) servePrimary(ctx context.Context) error {
	w := n.won
	n.won = nil
	lctx, stopLease := context.WithCancel(context.Background())
	defer stopLease()
	lost := make(chan error, 1)
	go func() { lost <- w.lease.keep(lctx) }()
	defer func() { // step down: the next term can start at once
		n.noteStepDown(w.epoch)
		if !n.revoke(w.lease.id) {
			// etcd is down: a lease it extends when it is back would
			// hold the next term off for a TTL more. Safe to keep
			// trying: this node acknowledges nothing any more.
			go func() {
				for range 120 {
					time.Sleep(500 * time.Millisecond)
					if n.cli.Ctx().Err() != nil || n.revoke(w.lease.id) {
						return // the node closed its client, or etcd answered
					}
				}
			}()
		}
	}()

	m, p, err := n.takeOver(ctx, w)
	if err != nil {
		return err
	}
	n.setRole("primary", m, nil)
	took := time.Since(w.lapsed)
	rec := Failover{From: w.from, To: n.cfg.Name, Epoch: p.Epoch, At: time.Now().UTC(), Took: took, Forced: w.forced}
	n.cli.Put(ctx, n.k.failover(), encode(rec))
	n.log.Warn("serving as the primary", "epoch", p.Epoch, "seq", p.Seq, "after", w.from, "failover_took", took.Round(time.Millisecond))
	n.hook(n.cfg.OnPromote, "primary", p.Epoch)

	pctx, stopPublish := context.WithCancel(ctx)
	defer stopPublish()
	go n.publishPrimary(pctx, m)
	go n.recordOutage(pctx, m, rec, n.termEnded(ctx, w))
	select {
	case <-ctx.Done():
		// Stepping down: stop acknowledging, seal, ship, unmount; then the
		// lease goes (deferred) and a backup takes over.
		n.hook(n.cfg.OnDemote, "backup", p.Epoch)
		err = m.Close()
	case err = <-lost:
		n.log.Error("deposed: the lease is lost; stopping the service and rejoining as a backup", "err", err)
		n.hook(n.cfg.OnDemote, "backup", p.Epoch)
		m.Abort()
		m.Close()
	case <-m.Deposed():
		// The backups saw the term end before this node did (etcd revoked
		// the lease, or this node cannot reach it): no barrier returns
		// again, so the service stops now, not at the lease's give-up time.
		err = primary.ErrDeposed
		n.log.Error("deposed: a backup refused this primary's epoch; stopping the service and rejoining as a backup")
		n.hook(n.cfg.OnDemote, "backup", p.Epoch)
		m.Abort()
		m.Close()
	case <-m.Done():
		err = fmt.Errorf("the mount went away")
		m.Close()
	}
	n.setRole("", nil, nil)
	return err
}

// takeOver readies this node's journal and volume for the term it won
// (replica.Promote) and mounts them as the primary.
func (n *Node) takeOver(ctx context.Context, w *won) (*mount.Mount, backup.Promotion, error) {
	var p backup.Promotion
	// Take over: everything the journal holds, applied; the new epoch.
	// The first term is the one no other term preceded: a node whose
	// backup role began before any term, and was elected later, is a
	// promoted backup. Taken for the first term, its volume (never
	// stopped cleanly by a mount) looked changed offline, and barriers
	// waited for a resync of every backup even when there was none.
	first := n.firstTerm && w.first
	// The members it starts with, recorded before anything can be
	// acknowledged (terms.go).
	starting := n.backupMembers(ctx)
	term, err := n.recordTerm(ctx, w.epoch, starting)
	if err != nil {
		return nil, p, fmt.Errorf("take over: %w", err)
	}
	n.mu.Lock()
	n.term = term
	n.mu.Unlock()
	mcfg := n.cfg.Mount
	mcfg.Backups, mcfg.Dynamic, mcfg.Lease = addrs(starting), true, w.lease.wait
	mcfg, p, err = replica.Promote(ctx, mcfg, backup.PromoteConfig{Checked: true, Epoch: w.epoch, FirstTerm: first, Logger: n.log})
	if err != nil {
		return nil, p, fmt.Errorf("take over: %w", err)
	}
	mcfg.Plugins = n.frontPlugins(mcfg.Plugins)
	mcfg.Events = n.ev
	switch {
	case len(mcfg.Backups) >= max(mcfg.MinBackups, 1):
	case mcfg.MinBackups > 0:
		n.log.Warn("too few other members are up: barriers wait until they join (--min-backups)", "up", len(mcfg.Backups), "min_backups", mcfg.MinBackups)
	case mcfg.Ack != "none":
		n.log.Warn("no other member is up: barriers are acknowledged on this node's disk alone until one joins, and are lost with it (--min-backups 0)")
	}
	m, err := mount.Start(mcfg)
	if err != nil {
		return nil, p, fmt.Errorf("take over: %w", err)
	}
	return m, p, nil
}

// otherBackups lists the other members' backup addresses.
func (n *Node) otherBackups(ctx context.Context) []string { return addrs(n.backupMembers(ctx)) }

// backupMembers returns the other members serving as backups, one per
// address.
func (n *Node) backupMembers(ctx context.Context) []Member {
	var out []Member
	for _, m := range n.members(ctx) {
		if m.Name != n.cfg.Name && m.Role == "backup" && !slices.ContainsFunc(out, func(o Member) bool { return o.Addr == m.Addr }) {
			out = append(out, m)
		}
	}
	return out
}

func addrs(ms []Member) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Addr)
	}
	return out
}

// members reads every member record.
func (n *Node) members(ctx context.Context) []Member {
	gctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := n.cli.Get(gctx, n.k.members(), clientv3.WithPrefix())
	if err != nil {
		return nil
	}
	return decodeMembers(resp.Kvs)
}

// publishPrimary republishes the primary's state and starts replicating
// to every member that appears, until ctx ends.
func (n *Node) publishPrimary(ctx context.Context, m *mount.Mount) {
	n.mu.Lock()
	term := n.term
	n.mu.Unlock()
	t := time.NewTicker(publishEvery)
	defer t.Stop()
	for i := 0; ; i++ {
		st := m.Summary()
		n.publish(ctx, Member{Role: "primary", Volume: st.VolumeID, Epoch: st.Epoch, Durable: st.LastSeq, Applied: st.LastSeq})
		if i%5 == 0 {
			n.addMembers(ctx, m, &term)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// addMembers starts replicating to every member serving as a backup that
// the mount does not stream to yet, each recorded in the term first.
func (n *Node) addMembers(ctx context.Context, m *mount.Mount, term *Term) {
	for _, b := range n.backupMembers(ctx) {
		if slices.Contains(m.Backups(), b.Addr) {
			continue
		}
		if err := n.recordJoined(ctx, term, b.Name); err != nil {
			n.log.Warn("add backup: the term's record in etcd", "backup", b.Addr, "member", b.Name, "err", err)
			continue
		}
		if err := m.AddBackup(b.Addr); err != nil {
			n.log.Warn("add backup", "backup", b.Addr, "err", err)
		}
	}
}

// hook runs a promotion or demotion command, waiting for it (at most a
// minute) and logging how it ended.
func (n *Node) hook(cmd, role string, epoch uint64) {
	if cmd == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "/bin/sh", "-c", cmd)
	c.Env = append(os.Environ(), "PBFS_NODE="+n.cfg.Name, "PBFS_ROLE="+role, "PBFS_EPOCH="+strconv.FormatUint(epoch, 10),
		"PBFS_VOLUME="+n.cfg.Mount.Mountpoint)
	out, err := c.CombinedOutput()
	if err != nil {
		n.log.Error("hook failed", "role", role, "cmd", cmd, "err", err, "output", string(out))
		return
	}
	n.log.Info("hook ran", "role", role, "cmd", cmd)
}

// revoke ends a lease this node held, reporting whether etcd answered
// (the lease is gone, now or before).
func (n *Node) revoke(id clientv3.LeaseID) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := n.cli.Revoke(ctx, id)
	return err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound)
}

// stepDown records when a primary gave its term up, so that the next one
// knows when clients began to wait (Failover.Outage).
type stepDown struct {
	Name  string    `json:"name"`
	Epoch uint64    `json:"epoch"`
	At    time.Time `json:"at"`
}

// noteStepDown records this node's step-down of epoch's term, if etcd
// answers at once: a node that cannot reach it lost the term anyway.
func (n *Node) noteStepDown(epoch uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	n.cli.Put(ctx, n.k.stepdown(), encode(stepDown{Name: n.cfg.Name, Epoch: epoch, At: time.Now().UTC()}))
}

// termEnded is when the term before w stopped serving clients: its
// primary's step-down, if it recorded one; else its lease's last renewal,
// a TTL before this node saw it lapse.
func (n *Node) termEnded(ctx context.Context, w *won) time.Time {
	gctx, cancel := bounded(ctx)
	defer cancel()
	if resp, err := n.cli.Get(gctx, n.k.stepdown()); err == nil && len(resp.Kvs) > 0 {
		var sd stepDown
		if json.Unmarshal(resp.Kvs[0].Value, &sd) == nil && sd.Name == w.from && sd.Epoch < w.epoch && w.lapsed.Sub(sd.At) < n.cfg.TTL {
			return sd.At
		}
	}
	return w.lapsed.Add(-n.cfg.TTL)
}

// recordOutage adds to the failover record what clients waited, once the
// mount has acknowledged its first write.
func (n *Node) recordOutage(ctx context.Context, m *mount.Mount, rec Failover, ended time.Time) {
	select {
	case <-ctx.Done():
		return
	case <-m.FirstAck():
	}
	rec.Outage = time.Since(ended)
	n.cli.Put(ctx, n.k.failover(), encode(rec))
	n.log.Info("first write acknowledged after the failover", "outage", rec.Outage.Round(time.Millisecond))
}
