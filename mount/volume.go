package mount

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/pathcheck"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/primary"
	"github.com/pbfs/pbfs/replicate/wire"
)

// ErrVolumeBusy refuses a volume another pbfs already serves: mounted
// twice, one write would land in two journals.
var ErrVolumeBusy = errors.New("volume is already served by pbfs")

// ConfigError is a configuration Start refused before touching anything
// (the CLI's usage error).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Check refuses what Start would refuse before touching anything, for a
// caller that must know before it does something of its own (promote).
func Check(cfg Config) error {
	if cfg.Backing == "" {
		cfg.Backing = cfg.Mountpoint
	}
	if err := cfg.check(); err != nil {
		if !errors.Is(err, ErrVolumeBusy) {
			err = &ConfigError{err}
		}
		return err
	}
	return nil
}

// check refuses, before anything is touched, every mistake it can see: a
// batch size too large or a negative size or interval, an ack policy the backups cannot meet, a bad
// backup address, a missing token, TLS files that do not load, a journal
// inside the volume, a volume that is missing, not a directory, or already
// served by pbfs.
func (cfg *Config) check() error {
	if cfg.MaxBatchBytes < 0 || cfg.MaxBatchBytes > journal.MaxBodySize/4 {
		return fmt.Errorf("batch size %d: want a number of bytes up to %d (0: the default)", cfg.MaxBatchBytes, journal.MaxBodySize/4)
	}
	if cfg.SealInterval < 0 {
		return fmt.Errorf("seal interval %s: want a positive duration (0: the default)", cfg.SealInterval)
	}
	if cfg.DegradeAfter < 0 {
		return fmt.Errorf("degrade-after %s: want a positive duration (0: never)", cfg.DegradeAfter)
	}
	if len(cfg.Backups) > 0 || cfg.Dynamic {
		pc := primary.Config{Backups: cfg.Backups, Ack: cfg.Ack, AckLevel: cfg.AckLevel, Token: cfg.Token, TLS: cfg.TLS, MinBackups: cfg.MinBackups, Dynamic: cfg.Dynamic}
		if err := pc.Check(); err != nil {
			return err
		}
		if !cfg.Dynamic && cfg.MinBackups > len(cfg.Backups) {
			return fmt.Errorf("min-backups %d: only %d backups given, so no barrier could return", cfg.MinBackups, len(cfg.Backups))
		}
		if cfg.Token == "" {
			return wire.ErrNoToken
		}
	} else {
		switch cfg.Ack {
		case "", "all", "none", "0":
		case "majority":
			return fmt.Errorf("ack policy %q needs backups: give --backup, or --ack none", cfg.Ack)
		default:
			if k, err := strconv.Atoi(cfg.Ack); err != nil || k < 0 {
				return fmt.Errorf("ack policy %q: want all, majority, none or a number", cfg.Ack)
			}
			return fmt.Errorf("ack policy %q needs backups: give --backup, or --ack none", cfg.Ack)
		}
		if cfg.TLS.Enabled() {
			return errors.New("TLS files given, but no backup to use them with")
		}
		if cfg.MinBackups != 0 {
			return fmt.Errorf("min-backups %d needs backups: give --backup", cfg.MinBackups)
		}
		switch cfg.AckLevel {
		case "", primary.AckDisk:
		case primary.AckMemory:
			return errors.New("ack level memory needs backups: give --backup")
		default:
			return fmt.Errorf("ack level %q: want disk or memory", cfg.AckLevel)
		}
	}
	for i, dir := range []string{cfg.Mountpoint, cfg.Backing} {
		what := "volume"
		if cfg.Backing != cfg.Mountpoint {
			what = []string{"mount point", "backing directory (--backing)"}[i]
		}
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s %s: not a directory", what, dir)
		}
	}
	if err := pathcheck.Outside(cfg.Journal, cfg.Backing); err != nil {
		return err
	}
	if err := journal.CheckReserve(cfg.Journal, cfg.JournalReserve); err != nil {
		return err
	}
	if cfg.Backing != cfg.Mountpoint {
		if err := pathcheck.Outside(cfg.Journal, cfg.Mountpoint); err != nil {
			return err
		}
	}
	for _, dir := range []string{cfg.Mountpoint, cfg.Backing} {
		if err := notServed(dir); err != nil {
			return err
		}
	}
	return nil
}

// notServed refuses dir if it lies on a pbfs mount: a mount over a mounted
// volume would stack on the first, and a volume inside another's would be
// captured twice.
// Without a mount table, the backing directory's lock (lock.go) still
// refuses a second daemon.
func notServed(dir string) error {
	point, err := pathcheck.ServedBy(dir)
	if err != nil {
		return err
	}
	if point != "" {
		return fmt.Errorf("%s: a pbfs mount at %s serves it: %w", dir, point, ErrVolumeBusy)
	}
	return nil
}

// openVolume opens the backing directory (lock.go locks it).
func openVolume(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open backing directory: %w", err)
	}
	return fd, nil
}

// ClearStaleMount detaches a dead FUSE mount left at dir by a daemon that
// was killed: its directory answers ENOTCONN and hides the volume.
func ClearStaleMount(dir string, log *slog.Logger) {
	// statfs always reaches the daemon (stat may be answered from the
	// kernel's attribute cache).
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != unix.ENOTCONN {
		return
	}
	log.Warn("detaching a dead FUSE mount left by a killed daemon", "dir", dir)
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		log.Error("detach dead mount", "dir", dir, "err", err)
	}
}
