package replica

import (
	"context"
	"fmt"

	"github.com/pbfs/pbfs/mount"
	"github.com/pbfs/pbfs/replicate/backup"
)

// Promote readies a stopped backup's journal and volume to serve as the
// primary that cfg describes, the one sequence `pbfs promote` and a node
// that won an election both take: it clears the dead FUSE mount a killed
// primary left on the mountpoint, checks cfg before anything changes (a
// *mount.ConfigError for a bad one), then promotes (backup.Promote:
// refuses an unsafe promotion, applies what the journal holds, records
// the new epoch); every error it returns starts "promote: ". pc's Volume and Journal come from cfg. It returns cfg
// with the new term set, for mount.Start.
func Promote(ctx context.Context, cfg mount.Config, pc backup.PromoteConfig) (mount.Config, backup.Promotion, error) {
	mount.ClearStaleMount(cfg.Mountpoint, cfg.Logger)
	if err := mount.Check(cfg); err != nil {
		return cfg, backup.Promotion{}, fmt.Errorf("promote: %w", err)
	}
	pc.Volume, pc.Journal = cfg.Mountpoint, cfg.Journal
	if cfg.Backing != "" {
		pc.Volume = cfg.Backing
	}
	if pc.Logger == nil {
		pc.Logger = cfg.Logger
	}
	p, err := backup.Promote(ctx, pc)
	if err != nil {
		return cfg, p, err
	}
	// In the first term the journal may be a pbfs mount's: its own open
	// marker and fingerprint say whether the volume is ahead of it.
	cfg.Epoch, cfg.Promoted = p.Epoch, !pc.FirstTerm
	return cfg, p, nil
}
