package replica

import (
	"context"
	"errors"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/manifest"
	"github.com/pbfs/pbfs/replicate/backup"
)

// backupControl is a running backup's control socket: its status, and
// its journal for `pbfs journal` while it holds the journal's lock.
type backupControl struct {
	b      *backup.Backup
	volume string
}

var errBackupBarrier = errors.New("a backup takes no barriers and starts no resyncs: ask its primary")

func (c backupControl) Barrier(context.Context) (uint64, error) { return 0, errBackupBarrier }

// Events is the backup's stream of state changes (control.Watchable).
func (c backupControl) Events() *events.Bus   { return c.b.Events() }
func (c backupControl) Resync([]string) error { return errBackupBarrier }

func (c backupControl) Status() control.Status {
	st := c.b.Status()
	j := c.b.Journal()
	check := j.BatchCheck()
	return control.Status{Role: "backup", Volume: c.volume, VolumeID: st.VolumeID, LastSeq: st.DurableSeq, Epoch: st.Epoch, Capture: false,
		Backup: &control.BackupSide{DurableSeq: st.DurableSeq, AppliedSeq: st.AppliedSeq, Stalled: st.Stalled, JournalFull: j.Refusing(),
			ApplyBlocked: st.ApplyBlocked},
		JournalBytes: j.DiskBytes(), JournalFree: j.FreeBytes(), JournalReserve: j.ReserveBytes(),
		JournalCheck: check.String(), JournalDamaged: check.DamagedBatches()}
}

func (c backupControl) Manifest(context.Context, []string, func(manifest.Entry) error) error {
	return errors.New("manifest: ask the primary's control socket (pbfs verify)")
}

func (c backupControl) Compare(context.Context, []string) (control.Comparison, error) {
	return control.Comparison{}, errors.New("compare: ask the primary's control socket (pbfs verify)")
}

func (c backupControl) Get(seq uint64) ([]byte, error) { return c.b.Journal().Get(seq) }

func (c backupControl) Scan(from uint64, fn func(seq uint64, enc []byte) error) error {
	return c.b.Journal().Scan(from, fn)
}
