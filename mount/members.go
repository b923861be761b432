package mount

import (
	"context"
	"errors"

	"github.com/pbfs/pbfs/journal"
)

// The backups a primary replicates to: adding and removing them while it
// runs, and resyncing them.

// AddBackup starts replicating to one more backup (a Dynamic mount); it
// joins the ack set once it has caught up.
func (m *Mount) AddBackup(addr string) error {
	if m.primary == nil {
		return errNoReplication
	}
	return m.primary.AddBackup(addr)
}

// AddMember adds a backup an operator names (pbfs member add), on a mount
// whose members no coordinator decides.
func (m *Mount) AddMember(addr string) error {
	if m.cfg.Lease != nil {
		return errCoordinated
	}
	return m.AddBackup(addr)
}

// RemoveMember stops replicating to addr (replicate.Primary.RemoveBackup),
// on a mount whose members no coordinator decides.
func (m *Mount) RemoveMember(ctx context.Context, addr string) (bool, error) {
	if m.cfg.Lease != nil {
		return false, errCoordinated
	}
	if m.primary == nil {
		return false, errNoReplication
	}
	return m.primary.RemoveBackup(ctx, addr)
}

// Backups lists the addresses the mount replicates to.
func (m *Mount) Backups() []string {
	if m.primary == nil {
		return nil
	}
	return m.primary.Backups()
}

// Resync makes every backup resync now.
func (m *Mount) Resync(backups []string) error {
	if m.primary == nil {
		return errors.New("resync: this mount has no backups")
	}
	return m.primary.Resync(backups...)
}

// resynced runs once every backup has been resynced after an unclean
// start: the backups hold the volume as it is, lost journal suffix and all.
func (m *Mount) resynced() {
	if !m.ahead.raised() {
		return
	}
	if err := m.store.SetMetaUint(journal.KeyAhead.Name, 0); err != nil {
		m.log.Error("clear the unclean marker", "err", err)
		return
	}
	m.ahead.clear()
	m.log.Info("every backup is resynced; replicating")
}

var (
	// errNoReplication refuses a membership change on a mount started
	// without backups.
	errNoReplication = errors.New("this mount was started without backups: restart it with --backup (a mount started with one adds and removes more while it runs)")
	// errCoordinated refuses one on a node's primary: the coordinator
	// records every member a term streams to before it is added, which an
	// election relies on.
	errCoordinated = errors.New("this primary is a pbfs node's: its members are the nodes the coordinator lists; start pbfs node on the new machine, or stop one and forget it with pbfs member remove --coordinator")
)
