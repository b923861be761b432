package apply

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Nothing on the apply or resync path opens a FIFO, a socket or a device
// node: opening a FIFO blocks until a peer comes, and opening a device
// reaches the device. Data goes only into regular files, opened through an
// O_PATH descriptor that is checked first; extended attributes are read
// and written by name through the parent directory, with the l* calls.

// ErrNotRegular marks a data op or a resync block aimed at something that
// is not a regular file (a diverged volume or a hostile batch).
var ErrNotRegular = fmt.Errorf("not a regular file: %w", unix.EINVAL)

// openRegular opens p in root with flag, never following a final symlink,
// and only if it is a regular file.
func openRegular(root *os.Root, p string, flag int) (*os.File, error) {
	pf, err := root.OpenFile(p, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer pf.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(pf.Fd()), &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &os.PathError{Op: "open", Path: p, Err: ErrNotRegular}
	}
	// Reopening the checked descriptor names exactly that inode. The file
	// stays out of Go's poller (os.NewFile of a blocking descriptor): a
	// regular file never blocks, and os.OpenFile's attempt to register it
	// cost four system calls.
	fd, err := unix.Open(fdPath(int(pf.Fd())), flag|unix.O_CLOEXEC, 0)
	for err == unix.EINTR { // as os.OpenFile retries: network and FUSE file systems return it
		fd, err = unix.Open(fdPath(int(pf.Fd())), flag|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
