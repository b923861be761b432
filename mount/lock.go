package mount

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/mountinfo"
	"github.com/pbfs/pbfs/internal/pathcheck"
)

// A mount holds an exclusive flock on its backing directory for as long as
// it runs, so a second daemon on the same directory, through any mount
// point, is refused. A stopping mount (unmounted from outside, as
// `umount; mount` of an fstab entry does, or stopped by a signal) holds
// the lock shared while it seals, ships and closes the journal; a new
// mount that finds it so waits for it (up to LockWait), rather than being
// refused because the old daemon has not exited yet. A mount that serves
// or is still starting, or a backup, holds it exclusively, and a new
// mount is refused at once.

// LockWait bounds how long a new mount waits for a stopping one to let go
// of the backing directory (its last seal, the final ship to the backups,
// the fingerprint of the volume).
var LockWait = 2 * time.Minute

// lockPoll is how often a waiting mount tries the lock again.
const lockPoll = 10 * time.Millisecond

// volumeLock is a mount's flock on its backing directory.
type volumeLock struct{ fd int }

// lockVolume takes the backing directory's lock, waiting while a stopping
// mount still holds it.
func lockVolume(dir string, log *slog.Logger) (*volumeLock, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("lock backing directory: %w", err)
	}
	start := time.Now()
	for waited := false; ; waited = true {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			if waited {
				log.Info("the stopping pbfs let go of the backing directory", "dir", dir, "waited", time.Since(start).Round(time.Millisecond))
			}
			return &volumeLock{fd}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			unix.Close(fd)
			return nil, fmt.Errorf("lock backing directory: %w", err)
		}
		// Shared is what a stopping mount holds: a serving one refuses it.
		if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
			unix.Close(fd)
			return nil, busyError(dir)
		}
		unix.Flock(fd, unix.LOCK_UN)
		if !waited {
			log.Info("waiting for the pbfs that is stopping on the backing directory to seal, ship and let go of it", "dir", dir, "up_to", LockWait)
		}
		if time.Since(start) > LockWait {
			unix.Close(fd)
			return nil, fmt.Errorf("%s: the pbfs stopping on it still holds it after %s; wait for that process to exit: %w", dir, LockWait, ErrVolumeBusy)
		}
		time.Sleep(lockPoll)
	}
}

// busyError names what holds dir: a pbfs mount whose source it is, or
// another pbfs process (a mount still starting, or a backup).
func busyError(dir string) error {
	if point := mountOf(dir); point != "" {
		return fmt.Errorf("%s: the pbfs mount at %s serves it: %w", dir, point, ErrVolumeBusy)
	}
	return fmt.Errorf("%s: another pbfs process holds it: %w", dir, ErrVolumeBusy)
}

// mountOf returns the point of a pbfs mount whose source is dir, if any.
func mountOf(dir string) string {
	r, err := pathcheck.Resolve(dir)
	if err != nil {
		return ""
	}
	tab, err := mountinfo.Read()
	if err != nil {
		return ""
	}
	for _, m := range tab {
		if m.FSType == "fuse.pbfs" && m.Source == r {
			return m.Point
		}
	}
	return ""
}

// stopping marks the mount as stopping, so a new mount of the volume
// waits for the lock. The shared lock replaces the exclusive one in one
// step, so no new mount gets in between.
func (l *volumeLock) stopping() {
	if l != nil {
		unix.Flock(l.fd, unix.LOCK_SH)
	}
}

// release lets the backing directory go.
func (l *volumeLock) release() {
	if l != nil && l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

// AwaitVolume waits, as Start would, while a stopping pbfs mount still
// holds cfg's backing directory: for a caller that must not take what
// that mount may still hold (its --admin address) before it lets go. It
// returns at once when the directory is free, or held by a pbfs that is
// not stopping (Start then refuses it).
func AwaitVolume(cfg Config) {
	dir := cfg.Backing
	if dir == "" {
		dir = cfg.Mountpoint
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if l, err := lockVolume(dir, cfg.Logger); err == nil {
		l.release()
	}
}
