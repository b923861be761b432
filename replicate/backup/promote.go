package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/wire"
)

// ErrNotPromotable refuses a promotion that could lose an acknowledged
// batch; the error names every reason. Promote's Force overrides it.
var ErrNotPromotable = errors.New("this backup cannot be promoted safely")

// ErrPrimaryJournal: a backup was asked to open (with RefusePrimary) a
// journal a primary last served.
var ErrPrimaryJournal = errors.New("this journal last served a primary (pbfs mount), not a backup")

// PromoteConfig describes a backup about to become the primary.
type PromoteConfig struct {
	Volume, Journal string
	// Peers are the other backups of the old primary, asked what they
	// hold; Token and TLS reach them.
	Peers []string
	Token string
	TLS   wire.TLSFiles
	Force bool
	// Checked: the caller (a coordinator) has established that this
	// backup holds every acknowledged batch, and chose Epoch, the new
	// term; the peers are not asked.
	Checked bool
	Epoch   uint64
	// FirstTerm: as Config's.
	FirstTerm bool
	Logger    *slog.Logger
}

// Promotion is what Promote did: the volume holds every batch up to Seq,
// and the new primary's term is Epoch.
type Promotion struct {
	Seq     uint64
	Epoch   uint64
	Forced  bool
	Reasons []string // why it was not safe, when forced
}

// promotedKey records promotions in the journal's metadata.
var promotedKey = journal.KeyPromoted.Name

// Promote readies a backup's journal and volume to serve as the primary:
// it refuses (ErrNotPromotable, naming the reasons) when this backup is
// known stale, is behind a reachable peer, or cannot prove it holds every
// acknowledged batch, then applies every whole seal its journal holds and
// picks an epoch above every epoch it and its peers have seen. The backup
// process must be stopped (the journal is locked otherwise). With Force
// the refusal becomes a loud warning, recorded in the journal.
//
// Why the rule is safe: a barrier returned only once Need of the Of
// backups held its batch durably. Any Of-Need+1 backups include one of
// those, and histories are prefixes of one another (a backup stores
// batches in seq order, checking the chain), so the backup holding the
// most among Of-Need+1 of them, itself included, holds every
// acknowledged batch. With Degrade a lagging backup may have been dropped
// from the ack set without knowing it, so every peer must be reached.
func Promote(ctx context.Context, cfg PromoteConfig) (Promotion, error) {
	p, err := promote(ctx, cfg)
	if err != nil {
		return p, fmt.Errorf("promote: %w", err)
	}
	return p, nil
}

func promote(ctx context.Context, cfg PromoteConfig) (Promotion, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// A journal a primary last served would be taken for a deposed
	// primary rejoining and marked to wait for a resync: refused before
	// that, so a refusal leaves it as it was.
	b, err := Open(Config{Volume: cfg.Volume, Journal: cfg.Journal, Token: "promote", Logger: cfg.Logger, Retain: -1,
		FirstTerm: cfg.FirstTerm, RefusePrimary: !cfg.Checked && !cfg.FirstTerm})
	if errors.Is(err, ErrPrimaryJournal) {
		return Promotion{}, fmt.Errorf("%w: %w; serve it with pbfs mount again, or promote a backup's journal", ErrNotPromotable, err)
	}
	if err != nil {
		return Promotion{}, err
	}
	defer b.Close()
	st := b.Status()
	b.mu.Lock()
	policy := b.policy
	b.mu.Unlock()
	var reasons []string
	var maxEpoch uint64
	if cfg.Checked {
		if st.Stalled {
			reasons = append(reasons, "this backup is stalled: its volume needs a resync")
		}
	} else {
		reasons, maxEpoch = b.promotable(ctx, cfg, st, policy)
	}
	// A fenced backup refuses primaries of its fence's epoch: the new
	// term is above it too.
	top := max(st.Epoch, st.Fenced, maxEpoch)
	if top >= wire.MaxEpoch {
		return Promotion{}, fmt.Errorf("epoch %d leaves no term after it (at most %d): a Hello stored it in this backup or a peer "+
			"before backups refused such epochs; run that backup once with pbfs backup --repair-epoch N, N the last primary's epoch", top, uint64(wire.MaxEpoch))
	}
	p := Promotion{Seq: b.complete.Load(), Epoch: top + 1}
	if cfg.Checked && cfg.Epoch > 0 {
		if cfg.Epoch >= wire.MaxEpoch {
			return p, fmt.Errorf("epoch %d: want below %d", cfg.Epoch, uint64(wire.MaxEpoch))
		}
		if cfg.Epoch <= max(st.Epoch, st.Fenced) {
			return p, fmt.Errorf("epoch %d is not above the journal's %d", cfg.Epoch, max(st.Epoch, st.Fenced))
		}
		p.Epoch = cfg.Epoch
	}
	if len(reasons) > 0 {
		if !cfg.Force {
			return p, fmt.Errorf("%w: %s", ErrNotPromotable, strings.Join(reasons, "; "))
		}
		p.Forced, p.Reasons = true, reasons
		cfg.Logger.Error("PROMOTING BY FORCE: acknowledged writes may be lost", "reasons", strings.Join(reasons, "; "))
	}
	if !st.Stalled {
		err := b.waitVolume(ctx, p.Seq, cfg.Logger)
		if stuck, ok := errors.AsType[*errApplyStuck](err); ok && cfg.Force {
			p.Forced, p.Reasons = true, append(p.Reasons, stuck.Error())
			cfg.Logger.Error("PROMOTING BY FORCE: acknowledged writes are lost", "reason", stuck.Error())
		} else if ok {
			return p, fmt.Errorf("%w: %w", ErrNotPromotable, err)
		} else if err != nil {
			return p, fmt.Errorf("apply what the journal holds: %w", err)
		}
		// The last apply window is in the page cache; the volume must
		// hold it before it serves as a primary's.
		if err := b.applier.Sync(); err != nil {
			return p, fmt.Errorf("sync the volume: %w", err)
		}
	}
	rec, _ := json.Marshal(map[string]any{"epoch": p.Epoch, "seq": p.Seq, "at": time.Now().UTC(), "forced": p.Forced, "reasons": p.Reasons})
	if err := b.store.SetMeta(promotedKey, rec); err != nil {
		return p, fmt.Errorf("record the promotion: %w", err)
	}
	if err := b.store.SetEpoch(p.Epoch); err != nil {
		return p, fmt.Errorf("record the epoch: %w", err)
	}
	cfg.Logger.Info("promoted: the volume holds every batch this backup holds", "seq", p.Seq, "epoch", p.Epoch, "forced", p.Forced)
	return p, nil
}

// promotable lists why promoting this backup could lose an acknowledged
// batch (nothing if it cannot), and the highest epoch its peers have seen.
func (b *Backup) promotable(ctx context.Context, cfg PromoteConfig, st Status, policy wire.AckPolicy) ([]string, uint64) {
	var reasons []string
	if st.Stalled {
		reasons = append(reasons, "this backup is stalled: its volume needs a resync")
	}
	if st.VolumeID == "" && st.DurableSeq == 0 {
		reasons = append(reasons, "this journal never received a volume or a batch from a primary")
	}
	if b.complete.Load() < st.DurableSeq {
		cfg.Logger.Warn("the journal ends inside a seal; its last batches are not applied", "complete", b.complete.Load(), "durable", st.DurableSeq)
	}
	reached, maxEpoch := 0, uint64(0)
	for _, addr := range cfg.Peers {
		peer, err := Query(ctx, addr, cfg.Token, cfg.TLS)
		if err != nil {
			cfg.Logger.Warn("peer unreachable", "peer", addr, "err", err)
			continue
		}
		if peer.VolumeID != "" && st.VolumeID != "" && peer.VolumeID != st.VolumeID {
			cfg.Logger.Warn("peer serves another volume; ignored", "peer", addr, "volume", peer.VolumeID)
			continue
		}
		reached++
		maxEpoch = max(maxEpoch, peer.Epoch)
		if peer.DurableSeq > b.complete.Load() {
			reasons = append(reasons, fmt.Sprintf("behind backup %s (it holds seq %d, this one %d)", addr, peer.DurableSeq, b.complete.Load()))
		}
	}
	switch {
	case !policy.Known():
		if st.DurableSeq > 0 {
			reasons = append(reasons, "no primary ever told this backup its ack policy")
		}
	case policy.Degrade && reached < int(policy.Of)-1:
		reasons = append(reasons, fmt.Sprintf("the old primary could drop lagging backups from the ack set, and only %d of the %d other backups answered",
			reached, policy.Of-1))
	case !policy.Degrade && reached < int(policy.Of-policy.Need):
		reasons = append(reasons, fmt.Sprintf("with %d of %d backups in the ack set, %d other backups must answer to prove no acknowledged batch is missing; %d did",
			policy.Need, policy.Of, policy.Of-policy.Need, reached))
	}
	return reasons, maxEpoch
}
