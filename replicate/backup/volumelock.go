package backup

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/apply"
)

// volumeLock is a backup's hold on its copy for the life of the backup:
// the copy flocked, so that no second backup applies into it, and
// mounted nosuid,nodev (apply.GuardCopy), so that nothing a batch writes
// there raises a local user's privileges or opens a device.
type volumeLock struct {
	f     *os.File
	guard *apply.CopyGuard // nil when the caller guards the copy itself
}

// lockVolume locks dir and, unless guarded, guards it.
func lockVolume(dir string, guarded bool) (*volumeLock, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open backup volume: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("backup volume %s: %w", dir, ErrVolumeBusy)
		}
		return nil, fmt.Errorf("lock backup volume: %w", err)
	}
	l := &volumeLock{f: f}
	if guarded {
		return l, nil
	}
	if l.guard, err = apply.GuardCopy(dir); err != nil {
		f.Close()
		return nil, fmt.Errorf("backup volume %s: %w: run the backup as root, or put the copy on a file system mounted nosuid,nodev", dir, err)
	}
	return l, nil
}

// Close releases the guard, then the lock.
func (l *volumeLock) Close() error {
	err := l.guard.Release()
	return errors.Join(err, l.f.Close())
}
