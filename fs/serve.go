package fs

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"bazil.org/fuse"

	"github.com/pbfs/pbfs/capture"
)

// Options configure a mount.
type Options struct {
	AllowOther bool
	// Xattrs serves extended attributes; with it off every xattr request
	// answers ENOSYS once and the kernel stops asking (it otherwise asks
	// for security.capability before every write).
	Xattrs bool
	// MinReaders and MaxReaders bound the request-loop pool.
	MinReaders, MaxReaders int
	Logger                 *slog.Logger
}

// Server is one mounted pbfs filesystem.
type Server struct {
	conn *fuse.Conn
	dir  string
	fs   *capture.FS
	opts Options
	log  *slog.Logger

	readers atomic.Int32
	busy    atomic.Int32
	wg      sync.WaitGroup
	errOnce sync.Once
	err     error
	done    chan struct{}
}

// Mount mounts fs at dir and starts serving it.
func Mount(dir string, cfs *capture.FS, o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MinReaders <= 0 {
		o.MinReaders = 4
	}
	if o.MaxReaders < o.MinReaders {
		o.MaxReaders = 64
	}
	mopts := []fuse.MountOption{
		fuse.FSName("pbfs"), fuse.Subtype("pbfs"), fuse.DefaultPermissions(),
		fuse.MaxReadahead(128 << 10), fuse.AsyncRead(),
		// pbfs clears setuid/setgid/capabilities itself (capture.Write), so
		// the kernel sets SB_NOSEC and stops asking getxattr
		// security.capability before every write.
		fuse.HandleKillPriv(),
	}
	if o.AllowOther {
		mopts = append(mopts, fuse.AllowOther())
	}
	conn, err := fuse.Mount(dir, mopts...)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	s := &Server{conn: conn, dir: dir, fs: cfs, opts: o, log: o.Logger, done: make(chan struct{})}
	for i := 0; i < o.MinReaders; i++ {
		s.spawn()
	}
	go func() {
		s.wg.Wait()
		close(s.done)
	}()
	return s, nil
}

// Done is closed when the kernel side of the mount has gone away.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err returns why serving stopped (nil after a clean unmount).
func (s *Server) Err() error { return s.err }

// Unmount detaches the mount and waits for the request loop to end.
func (s *Server) Unmount() error {
	err := fuse.Unmount(s.dir)
	if err != nil {
		// Busy: detach lazily so the service's open files keep working
		// until closed, as umount -l does.
		if err2 := syscall.Unmount(s.dir, syscall.MNT_DETACH); err2 != nil {
			return fmt.Errorf("unmount %s: %w", s.dir, err)
		}
	}
	<-s.done
	return s.conn.Close()
}

func (s *Server) spawn() {
	s.readers.Add(1)
	s.wg.Add(1)
	go s.reader()
}

// reader reads and handles requests until the connection ends. When it
// takes the last idle slot it starts another reader, up to MaxReaders, so
// a slow request (an fsync, a barrier wait) never stalls the others.
//
// Only the end of the connection stops a reader. read(2) on /dev/fuse
// fails with ENOENT when the kernel withdrew an interrupted request before
// we read it (signals make that common), and with EINTR or EAGAIN; a reader
// that gave up on those would leave the mount with nobody reading, and
// every caller hung.
func (s *Server) reader() {
	defer s.wg.Done()
	defer s.readers.Add(-1)
	for {
		req, err := s.conn.ReadRequest()
		if err != nil {
			switch {
			case err == io.EOF || errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.EBADF):
				return
			case errors.Is(err, syscall.EINTR), errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.ENOENT):
				continue
			}
			// A malformed message is dropped; the kernel's caller gets
			// nothing for it, but the mount keeps serving.
			s.log.Error("fuse read failed", "err", err)
			s.errOnce.Do(func() { s.err = err })
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if s.busy.Add(1) >= s.readers.Load() && s.readers.Load() < int32(s.opts.MaxReaders) {
			s.spawn()
		}
		s.serve(req)
		s.busy.Add(-1)
	}
}
