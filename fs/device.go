package fs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrNoFUSE: this process cannot open /dev/fuse, so it cannot mount.
var ErrNoFUSE = errors.New("cannot use FUSE")

// CheckDevice reports, before anything is created, whether this process
// can open /dev/fuse, and if not what to do about it.
func CheckDevice() error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	switch {
	case err == nil:
		f.Close()
		return nil
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENXIO), errors.Is(err, syscall.ENODEV):
		return fmt.Errorf("%w: there is no /dev/fuse: load the fuse module (modprobe fuse), or give a container the device (--device /dev/fuse)", ErrNoFUSE)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("%w: /dev/fuse: %v: run pbfs as root (it mounts, and serves other users' files), or give this user read and write access to /dev/fuse", ErrNoFUSE, syscall.EACCES)
	}
	return fmt.Errorf("%w: /dev/fuse: %v", ErrNoFUSE, err)
}
