package fs

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrConnectionEnded: Abort found the connection already ended.
var ErrConnectionEnded = errors.New("the FUSE connection has already ended")

// fusectl is where the FUSE control file system shows a directory per
// connection, named by its id, with the file that aborts it.
const fusectl = "/sys/fs/fuse/connections"

// aborter holds the connection's abort control file, opened at mount, part
// of Server. Its id is the minor device number of the mount's file
// system, which the kernel gives to the next mount as soon as this one's
// superblock is gone, possibly before the request loop has read the end of
// the connection. A write to the file opened while the connection lived
// reaches that connection or, once it is gone, nothing (the kernel
// detaches the control files of an ended connection from it); a write to
// the path by id could abort a stranger's mount.
type aborter struct {
	abortMu   sync.Mutex
	abortFile *os.File // nil: not opened (see abortErr) or closed
	abortErr  error    // why it could not be opened
	abortDone bool     // the connection ended: the file is closed
}

// openAbort opens the connection's abort file (atControl: the control
// file system, if pbfs mounts it, is detached again at once, and the open
// file keeps it). Where it cannot be opened (no privilege to mount it, an
// id not found), Abort falls back to the path.
func (s *Server) openAbort() {
	id := s.connID()
	if id == "" {
		s.abortErr = errors.New("the connection's id is unknown")
		return
	}
	s.abortErr = atControl(id, func(abort string) (err error) {
		s.abortFile, err = os.OpenFile(abort, os.O_WRONLY, 0)
		return err
	})
	if s.abortErr != nil {
		s.abortFile = nil
	}
}

// closeAbort closes the abort file once the connection has ended.
func (s *Server) closeAbort() {
	s.abortMu.Lock()
	defer s.abortMu.Unlock()
	s.abortDone = true
	if s.abortFile != nil {
		s.abortFile.Close()
		s.abortFile = nil
	}
}

// Abort ends the FUSE connection at once, through the kernel's control
// file for it: requests in flight and every later one fail with ENOTCONN,
// and the request loop ends. It is how a stop that waits for the service
// to close its files is forced. Once the connection has ended it does
// nothing.
func (s *Server) Abort() error {
	select {
	case <-s.closing:
		return fmt.Errorf("abort: %w", ErrConnectionEnded)
	case <-s.done:
		return fmt.Errorf("abort: %w", ErrConnectionEnded)
	default:
	}
	return s.abortConn()
}

// abortConn writes the abort: to the file opened at mount, or, where
// that could not be opened, to the path by id while the connection
// lives (a race with its end remains there).
func (s *Server) abortConn() error {
	s.abortMu.Lock()
	defer s.abortMu.Unlock()
	switch {
	case s.abortFile != nil:
		if _, err := s.abortFile.Write([]byte("1")); err != nil {
			return fmt.Errorf("abort connection %s: %w", s.connID(), err)
		}
		return nil
	case s.abortDone:
		return fmt.Errorf("abort: %w", ErrConnectionEnded)
	}
	s.log.Warn("aborting the FUSE connection by its id: its control file was not opened at mount", "err", s.abortErr)
	return s.abortByID()
}

// abortByID writes the abort to the connection's control file by path.
func (s *Server) abortByID() error {
	id := s.connID()
	if id == "" {
		return errors.New("abort: the connection's id is unknown")
	}
	err := atControl(id, func(abort string) error { return os.WriteFile(abort, []byte("1"), 0) })
	if err != nil {
		return fmt.Errorf("abort connection %s: %w", id, err)
	}
	return nil
}

// atControl runs do with the path of connection id's abort file, with the
// control file system mounted for as long as do takes where nobody has
// mounted it (systemd does; a container or a bare machine may not).
func atControl(id string, do func(abort string) error) error {
	if _, err := os.Stat(fusectl + "/" + id); errors.Is(err, os.ErrNotExist) {
		if err := unix.Mount("fusectl", fusectl, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("mount fusectl at %s: %w", fusectl, err)
		}
		defer unix.Unmount(fusectl, unix.MNT_DETACH)
	}
	return do(fusectl + "/" + id + "/abort")
}
