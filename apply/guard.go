package apply

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"
)

// A resync removes whatever the primary does not have. It never removes,
// or descends into, what is not the volume: another file system mounted
// inside it, or a directory the applier was told to protect (the backup's
// own journal, should it ever be reachable from the volume).

// ErrProtected refuses a removal that would reach a protected directory
// or cross into another file system.
var ErrProtected = errors.New("refusing to remove what is not the volume")

type devIno struct{ dev, ino uint64 }

// Protect makes every resync refuse to remove dir or anything holding it.
func (a *Applier) Protect(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("protect %s: %w", dir, err)
	}
	a.protected = append(a.protected, devIno{st.Dev, st.Ino})
	return nil
}

// foreign reports why the entry at p (with its stat) is not the volume's
// to remove, or "" if it is.
func (a *Applier) foreign(st *syscall.Stat_t) string {
	if uint64(st.Dev) != a.dev {
		return "another file system is mounted there"
	}
	for _, d := range a.protected {
		if d.dev == uint64(st.Dev) && d.ino == st.Ino {
			return "it is a protected directory (the backup's journal)"
		}
	}
	return ""
}

// foreignAbove reports why a directory holding p is not the volume's to
// remove from, or "" if none is.
func (a *Applier) foreignAbove(p string) string {
	for q := parentDir(p); q != "."; q = parentDir(q) {
		if fi, err := a.root.Lstat(q); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				if why := a.foreign(st); why != "" {
					return why
				}
			}
		}
	}
	return ""
}

// removeAll removes p and everything under it, after checking that none
// of it is foreign.
func (a *Applier) removeAll(p string) error {
	err := walkRoot(a.root, p, func(q string, d fs.DirEntry) error {
		fi, err := a.root.Lstat(q)
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if why := a.foreign(st); why != "" {
				return fmt.Errorf("remove %s: %s: %w", q, why, ErrProtected)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	a.files.removing(p)
	return a.root.RemoveAll(p)
}

// rootDev returns the device of the open root.
func rootDev(r *os.Root) (uint64, error) {
	fi, err := r.Stat(".")
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("stat %s: no device", path.Clean(r.Name()))
	}
	return uint64(st.Dev), nil
}
