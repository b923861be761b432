package mountinfo

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrStopped: the watcher was stopped.
var ErrStopped = errors.New("mount table watcher stopped")

// Watcher waits for the mount table to change: the kernel flags
// /proc/self/mountinfo with POLLPRI whenever a mount of this namespace
// comes, goes or changes. One goroutine calls Next and, once it returns an
// error, Close; any goroutine may call Stop.
type Watcher struct {
	fd   int // /proc/self/mountinfo
	wake int // an eventfd Stop writes to
}

// Watch starts watching the table as it is now.
func Watch() (*Watcher, error) {
	fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("watch mount table: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch mount table: %w", err)
	}
	return &Watcher{fd: fd, wake: wake}, nil
}

// Next blocks until the table has changed since the last call (or since
// Watch), then returns nil; ErrStopped once Stop was called.
func (w *Watcher) Next() error {
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLPRI}, {Fd: int32(w.wake), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("watch mount table: %w", err)
		}
		if fds[1].Revents != 0 {
			return ErrStopped
		}
		if fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0 {
			return nil
		}
	}
}

// Stop makes the current and every later Next return ErrStopped.
func (w *Watcher) Stop() {
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	unix.Write(w.wake, one)
}

// Close releases the watcher's descriptors; no Next may run.
func (w *Watcher) Close() {
	unix.Close(w.fd)
	unix.Close(w.wake)
}
