package fs

import (
	"context"
	"errors"
	"syscall"

	"bazil.org/fuse"

	"github.com/pbfs/pbfs/capture"
)

// errno maps any error from the capture core to the errno the caller of
// the syscall sees. It is the only place that does.
func errno(err error) fuse.Errno {
	var e syscall.Errno
	switch {
	case errors.As(err, &e):
		return fuse.Errno(e)
	case errors.Is(err, capture.ErrStale):
		return fuse.Errno(syscall.ESTALE)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fuse.Errno(syscall.EINTR)
	}
	return fuse.Errno(syscall.EIO)
}
