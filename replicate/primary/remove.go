package primary

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pbfs/pbfs/internal/events"
)

// Removing a backup from a running primary. A backup's election rule goes
// by the ack policy the primary last told it (docs/FAILOVER.md): told
// {2 of 2}, it alone may be promoted. Once removed it receives nothing, and
// the writes acknowledged without it are on the others only, so before it
// goes it is told a policy under which every backup must report (Degrade,
// as a degraded backup's is): alone, it can no longer be promoted. A
// backup that is down cannot be told; RemoveBackup says so, and the
// operator must not promote it (pbfs status, and the docs, say what to do
// with it).

// ErrNotBackup: the address is not one of the primary's backups.
var ErrNotBackup = errors.New("not a backup of this primary")

// tellRemovedWithin bounds how long RemoveBackup waits for the backup to
// confirm the policy that keeps it from being promoted alone.
const tellRemovedWithin = 5 * time.Second

// RemoveBackup stops shipping to the backup at addr and takes it out of
// the ack set; the others are told the new policy. It reports whether the
// backup confirmed it can no longer be promoted alone. Removing a backup
// below --min-backups is refused.
func (p *Primary) RemoveBackup(ctx context.Context, addr string) (told bool, err error) {
	shippers := p.list()
	i := slices.IndexFunc(shippers, func(s *Shipper) bool { return s.addr == addr })
	if i < 0 {
		return false, fmt.Errorf("remove backup %s: %w (its backups: %s)", addr, ErrNotBackup, strings.Join(p.Backups(), ", "))
	}
	if left := len(shippers) - 1; left < p.cfg.MinBackups {
		return false, fmt.Errorf("remove backup %s: --min-backups %d needs %d backups, and %d would be left: add another first", addr, p.cfg.MinBackups, p.cfg.MinBackups, left)
	}
	s := shippers[i]
	told = p.tellRemoved(ctx, s)
	p.smu.Lock()
	p.shippers = slices.DeleteFunc(p.shippers, func(o *Shipper) bool { return o == s })
	p.smu.Unlock()
	s.stop()
	s.m.state.WithLabelValues(addr).Set(0)
	p.announce()
	p.notify()
	p.log.Info("backup removed", "backup", addr, "told", told, "backups", strings.Join(p.Backups(), ","))
	p.cfg.Events.Emit(events.KindBackupRemoved, "backup", addr, "told", told)
	return told, nil
}

// tellRemoved tells s a policy by which it is never promoted alone, and
// waits (bounded) for it to confirm.
func (p *Primary) tellRemoved(ctx context.Context, s *Shipper) bool {
	if !s.up.Load() {
		return false
	}
	pol := s.announced()
	pol.Degrade = true
	s.policy.Store(&pol)
	s.rehello()
	ctx, cancel := context.WithTimeout(ctx, tellRemovedWithin)
	defer cancel()
	for {
		if c := s.confirmed.Load(); c != nil && *c == pol {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}
