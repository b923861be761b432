package backup

import (
	"fmt"
	"time"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/internal/pathcheck"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/wire"
)

// Opening a backup, in stages (Open): the configuration checked,
// the parts opened, the journal's state read, the last run's progress
// recovered, the loops started.

// checkBackup refuses a configuration no backup can run with.
func checkBackup(cfg Config) error {
	if cfg.Token == "" {
		return wire.ErrNoToken
	}
	// A journal inside the volume would be removed by the first resync,
	// which makes the volume equal to the primary's.
	if err := pathcheck.Outside(cfg.Journal, cfg.Volume); err != nil {
		return err
	}
	// A volume a pbfs mount serves is the primary's: batches applied
	// into it would be captured again.
	if point, err := pathcheck.ServedBy(cfg.Volume); err != nil {
		return fmt.Errorf("backup volume %s: %w", cfg.Volume, err)
	} else if point != "" {
		return fmt.Errorf("backup volume %s: it lies on the pbfs mount at %s: %w", cfg.Volume, point, ErrVolumeBusy)
	}
	return nil
}

// openParts locks the volume and opens the journal, the applier and the
// apply marks; Close closes whichever of them it opened.
func (b *Backup) openParts() error {
	cfg := b.cfg
	var err error
	// One backup per volume: two would apply every batch twice.
	if b.lock, err = lockVolume(cfg.Volume, cfg.Guarded); err != nil {
		return err
	}
	if b.lock.guard != nil {
		b.log.Info("the copy is mounted nosuid,nodev while the backup serves it", "volume", cfg.Volume, "guard", b.lock.guard.How)
	}
	if b.store, err = journal.OpenStore(cfg.Journal, journal.StoreOptions{Logger: cfg.Logger, Reserve: cfg.JournalReserve}); err != nil {
		return err
	}
	if role, _ := b.store.Meta(journal.KeyRole.Name); cfg.RefusePrimary && string(role) == journal.RolePrimary {
		return ErrPrimaryJournal
	}
	if b.applier, err = apply.New(cfg.Volume, cfg.Logger); err != nil {
		return err
	}
	if err = b.applier.Protect(cfg.Journal); err != nil {
		return err
	}
	if b.mark, err = openApplyMark(cfg.Journal); err != nil {
		return err
	}
	b.applier.SetMarker(b.mark.write)
	b.prog, err = openProgress(cfg.Journal)
	return err
}

// loadState reads what the journal's metadata says of this backup: the
// volume's id, the ack policy, the fence, the epoch.
func (b *Backup) loadState() error {
	st := b.store
	vid, err := st.Meta(journal.KeyVolume.Name)
	if err != nil {
		return err
	}
	b.volumeID = string(vid)
	if p, err := st.Meta(policyKey); err == nil {
		b.policy = decodePolicy(p)
	}
	if f, err := st.MetaUint(fencedKey); err == nil {
		b.fenced.Store(f)
		b.m.fenced.Set(float64(f))
	}
	return b.repairEpoch(b.cfg.RepairEpoch)
}

// startLoops starts the apply loop, the check of the journal's older
// segments and, unless the backup keeps everything, the retention.
func (b *Backup) startLoops() {
	st := b.store
	b.loops.Add(1)
	go func() { defer b.loops.Done(); b.applyLoop() }()
	b.loops.Add(1)
	go func() { defer b.loops.Done(); st.CheckBatches(b.doneCtx()) }() // the older segments (journal/check.go)
	if b.cfg.Retain > 0 {
		r := &journal.Retention{Store: st, Window: b.cfg.Retain, SafeSeq: b.synced.Load,
			Every: min(10*time.Second, b.cfg.Retain), Logger: b.log}
		b.loops.Add(1)
		go func() { defer b.loops.Done(); r.Run(b.doneCtx()) }()
	}
}

// recover sets the backup's progress from what the last run left
// (applied, and the batch it was applying) and the journal's role: a
// journal a primary last served waits for a resync, as does one that
// lost batches the volume applied; a torn apply window is redone.
func (b *Backup) recover(applied, applying uint64) error {
	st := b.store
	b.applied.Store(applied)
	b.synced.Store(applied)
	b.complete.Store(lastComplete(st))
	marked, applying, err := b.takeRole(applying)
	if err != nil {
		return err
	}
	if last := st.Last().Seq; b.applied.Load() > last {
		// The journal always keeps its newest batch and a backup applies
		// only what it holds: a journal that ends before what was applied
		// lost batches (a segment deleted or damaged), and what it asks
		// for next would be applied twice. Only a resync is sure.
		b.log.Error("the journal ends before what the volume applied: it lost batches; the volume waits for a resync", "journal_last", last, "applied", b.applied.Load())
		marked = true
		if err := st.SetMetaUint(journal.KeyStalled.Name, last+1); err != nil {
			return err
		}
	}
	if stalled, _ := st.MetaUint(journal.KeyStalled.Name); stalled > 0 {
		b.stalled.Store(true)
		if !marked {
			// Not said above: an earlier run found it (an apply that
			// failed, a journal that lost batches, a primary's journal).
			b.log.Error("this backup's volume needs a resync: an earlier run stopped applying at this seq (an apply failed, the journal lost batches, or it had served a primary)", "seq", stalled)
		}
	} else if applying > b.applied.Load() {
		b.recoverTorn(applying)
	} else {
		b.recoverWindow()
	}
	return nil
}

// takeRole acts on the role the journal last served. It reports whether
// it marked the volume for a resync (and said why), and what is left of
// the batch being applied.
func (b *Backup) takeRole(applying uint64) (bool, uint64, error) {
	st := b.store
	role, _ := st.Meta(journal.KeyRole.Name)
	switch former, _ := st.MetaUint(formerPrimaryKey); {
	case string(role) == journal.RolePrimary && b.cfg.FirstTerm:
		// The journal of a primary that ran before any coordinator (pbfs
		// mount, then pbfs node): its volume is the authoritative copy,
		// holding every batch (a crash of that mount shows in its open
		// marker, which the next mount on it acts on).
		b.log.Info("this journal served a primary before the coordinator's first term; its volume holds all of it", "seq", st.Last().Seq)
		b.applied.Store(st.Last().Seq)
		b.synced.Store(st.Last().Seq)
		return false, 0, b.prog.save(st.Last().Seq, 0)
	case former > 0 && string(role) != journal.RolePrimary:
		b.formerEpoch = former // restarted before the resync that ends it
	case string(role) == journal.RolePrimary:
		// The journal last served a primary (a deposed one, rejoining):
		// its volume holds what that primary applied, journaled or not,
		// and its tail may not be in the new primary's history. Only a
		// resync brings it back; what that discards is kept aside.
		b.log.Warn("this journal last served a primary; the volume waits for a resync from the current one")
		b.formerEpoch = max(st.Epoch(), 1)
		if err := st.SetMetaUint(formerPrimaryKey, b.formerEpoch); err != nil {
			return true, applying, err
		}
		if err := st.SetMetaUint(journal.KeyStalled.Name, st.Last().Seq+1); err != nil {
			return true, applying, err
		}
		return true, applying, st.SetMeta(journal.KeyRole.Name, []byte(journal.RoleBackup))
	}
	return false, applying, nil
}
