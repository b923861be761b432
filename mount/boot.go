package mount

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/replicate/backup"
)

// With the replicated or the deferred fsync policy the service's fsyncs do
// not reach the primary's disk: what they made durable is on the backups
// (at once, or once the frontend's next barrier covered it), and only in
// the primary's page cache. A crash of pbfs alone keeps the page cache,
// and the volume is still whole; a crash of the machine loses it, and the
// volume may lack writes the backups hold and clients saw acknowledged. An
// unclean restart normally resyncs the backups from the volume, which
// would then spread the loss. So a mount records the machine's boot id and
// whether it skipped local syncs; a start after an unclean stop on a
// machine that has rebooted since refuses to serve such a volume
// (ErrVolumeUntrusted): promote a backup instead, and let this node rejoin
// as a backup, which resyncs it from the new primary.
// Config.TrustVolume overrides.
//
// A clean stop syncs the backing file system before marking the journal
// closed, so a volume left cleanly is always whole on disk.

// ErrVolumeUntrusted refuses a volume that may have lost writes its
// backups hold.
var ErrVolumeUntrusted = errors.New("the machine restarted while this primary's fsyncs skipped its disk: its volume may lack acknowledged writes the backups hold")

var (
	bootKey      = backup.BootKey            // the boot id of the machine the last mount ran on
	localSyncKey = journal.KeyLocalSync.Name // "0" if its fsyncs skipped the primary's disk
)

// skipsLocalSync reports whether some fsync on the volume skips the
// primary's disk.
func skipsLocalSync(rules []sdk.Rule, def sdk.FsyncPolicy) bool {
	return usesPolicy(rules, def, sdk.FsyncReplicated, sdk.FsyncDeferred)
}

// usesPolicy reports whether the default policy, or a rule's for paths
// that are replicated, is one of ps.
func usesPolicy(rules []sdk.Rule, def sdk.FsyncPolicy, ps ...sdk.FsyncPolicy) bool {
	if slices.Contains(ps, def) {
		return true
	}
	for _, r := range rules {
		if !r.Hint.LocalOnly && slices.Contains(ps, r.Hint.Fsync) {
			return true
		}
	}
	return false
}

// checkBoot refuses a volume an unclean stop on a rebooted machine may
// have cut short, then records this mount's boot id and sync policy.
func (m *Mount) checkBoot(unclean, skipsSync bool) error {
	prev, err := m.store.Meta(bootKey)
	if err != nil {
		return err
	}
	prevSync, err := m.store.Meta(localSyncKey)
	if err != nil {
		return err
	}
	now := backup.BootID()
	if unclean && string(prevSync) == "0" && len(prev) > 0 && !bytes.Equal(prev, now) && !m.cfg.Promoted {
		if !m.cfg.TrustVolume {
			return fmt.Errorf("%w; promote a backup (pbfs promote) and rejoin this node as a backup, or pass --trust-volume to serve this volume as it is", ErrVolumeUntrusted)
		}
		m.log.Warn("serving a volume that may lack acknowledged writes (--trust-volume): "+ErrVolumeUntrusted.Error(), "previous_boot", string(prev))
	}
	sync := "1"
	if skipsSync {
		sync = "0"
	}
	if err := m.store.SetMeta(localSyncKey, []byte(sync)); err != nil {
		return err
	}
	return m.store.SetMeta(bootKey, now)
}
