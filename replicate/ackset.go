package replicate

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pbfs/pbfs/journal"
)

// ParseAck reads an ack policy for n backups: "all", "majority" (a
// majority of the group, primary included), "none" or a number.
func ParseAck(policy string, n int) (int, error) {
	switch policy {
	case "", "all":
		return n, nil
	case "majority":
		return (n + 1) / 2, nil
	case "none":
		return 0, nil
	}
	k, err := strconv.Atoi(policy)
	if err != nil || k < 0 || k > n {
		return 0, fmt.Errorf("ack policy %q: want all, majority, none or a number from 0 to %d", policy, n)
	}
	return k, nil
}

// Primary ships the journal to every backup and answers whether a seq is
// durable on the ack set.
type Primary struct {
	shippers []*Shipper
	need     int
	m        *shipMetrics
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu      sync.Mutex
	changed chan struct{}
}

// PrimaryConfig configures the primary side.
type PrimaryConfig struct {
	Backups  []string
	Ack      string
	Token    string
	VolumeID string
	Store    *journal.Store
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// StartPrimary starts a shipper per backup.
func StartPrimary(cfg PrimaryConfig) (*Primary, error) {
	need, err := ParseAck(cfg.Ack, len(cfg.Backups))
	if err != nil {
		return nil, err
	}
	if len(cfg.Backups) > 0 && cfg.Token == "" {
		return nil, ErrNoToken
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Primary{need: need, m: newShipMetrics(cfg.Registry), changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	for _, addr := range cfg.Backups {
		s, err := newShipper(addr, cfg.Token, cfg.VolumeID, cfg.Store, p.m, p.notify, cfg.Logger)
		if err != nil {
			cancel()
			return nil, err
		}
		p.shippers = append(p.shippers, s)
	}
	for _, s := range p.shippers {
		p.wg.Add(1)
		go func() { defer p.wg.Done(); s.run(ctx) }()
	}
	cfg.Logger.Info("replicating", "backups", strings.Join(cfg.Backups, ","), "ack", cfg.Ack, "need", need)
	return p, nil
}

func (p *Primary) notify() {
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// Wait returns once seq is durable on the ack set, or fails when this
// primary is deposed or ctx ends.
func (p *Primary) Wait(ctx context.Context, seq uint64) error {
	start := time.Now()
	for {
		p.mu.Lock()
		ch := p.changed
		p.mu.Unlock()
		have := 0
		for _, s := range p.shippers {
			if s.deposed.Load() {
				return ErrDeposed
			}
			if s.acked.Load() >= seq {
				have++
			}
		}
		if have >= p.need {
			p.m.barriers.Observe(time.Since(start).Seconds())
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %d of %d backups to hold seq %d: %w", p.need, len(p.shippers), seq, ctx.Err())
		case <-ch:
		}
	}
}

// BackupStatus describes one backup as the primary sees it.
type BackupStatus struct {
	Addr       string `json:"addr"`
	Up         bool   `json:"up"`
	AckedSeq   uint64 `json:"acked_seq"`
	AppliedSeq uint64 `json:"applied_seq"`
	Stale      bool   `json:"stale"`
}

// Status lists the backups.
func (p *Primary) Status() []BackupStatus {
	var out []BackupStatus
	for _, s := range p.shippers {
		out = append(out, BackupStatus{Addr: s.addr, Up: s.up.Load(), AckedSeq: s.acked.Load(), AppliedSeq: s.applied.Load(), Stale: s.stale.Load()})
	}
	return out
}

// Close stops shipping.
func (p *Primary) Close() {
	p.cancel()
	p.wg.Wait()
}
