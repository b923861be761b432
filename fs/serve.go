package fs

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"

	"bazil.org/fuse"
	"github.com/prometheus/client_golang/prometheus"

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
	// Registry, if set, gets the mount's request counters.
	Registry prometheus.Registerer
	// Barrier, if set, makes everything written before the call durable
	// on the ack set; fsyncs of files whose policy is replicated or both
	// take one (fsync.go).
	Barrier func(context.Context) error
	// Source is what the mount table names as the mount's source: the
	// backing directory, so that findmnt -S, fstab and xfstests find the
	// mount by it ("pbfs" if empty).
	Source string
}

// Server is one mounted pbfs filesystem.
type Server struct {
	conn *fuse.Conn
	dir  string
	fs   *capture.FS
	opts Options
	log  *slog.Logger
	m    *metrics

	loop      // the request loop's state (loop.go)
	flush     flusher
	fsyncs    fsyncer
	wg        sync.WaitGroup
	errOnce   sync.Once
	err       error
	done      chan struct{}
	goneState // gone.go
	aborter   // abort.go
}

// Mount mounts fs at dir and starts serving it.
func Mount(dir string, cfs *capture.FS, o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MinReaders <= 0 {
		o.MinReaders = 1
	}
	if o.MaxReaders < o.MinReaders {
		o.MaxReaders = 64
	}
	if o.Source == "" {
		o.Source = "pbfs"
	}
	mopts := []fuse.MountOption{
		fuse.FSName(escapeOpt(o.Source)), fuse.Subtype("pbfs"),
		fuse.MaxReadahead(128 << 10), fuse.AsyncRead(),
		// pbfs clears setuid/setgid/capabilities itself (capture.Write), so
		// the kernel sets SB_NOSEC and stops asking getxattr
		// security.capability before every write.
		fuse.HandleKillPriv(),
		// A symlink's target never changes (it is replaced, through this
		// mount), so the kernel may keep it.
		fuse.CacheSymlinks(),
		// File handles resolve after the kernel dropped the inode: it asks
		// for the node by id (lookupDot).
		fuse.ExportSupport(),
	}
	if o.AllowOther {
		// Other users reach the mount: the kernel checks every access
		// against the file's mode, owner and the caller's groups and
		// capabilities, as on the backing file system, and against its
		// POSIX ACLs when the backing file system keeps them (capture
		// then applies the umask, or a parent's default ACL instead).
		mopts = append(mopts, fuse.AllowOther(), fuse.DefaultPermissions())
		if o.Xattrs && cfs.SupportsACLs() {
			mopts = append(mopts, fuse.PosixACL())
		}
	}
	// Without allow_other the kernel admits only callers whose uids and
	// gids are all the mounting user's, that is pbfs's own, so the backing
	// file system's checks on pbfs's syscalls are the checks those callers
	// would get (access(2) is answered by faccessat with pbfs's
	// credentials, exec still needs an x bit). default_permissions would
	// then buy nothing and cost two GETATTR round trips per file created
	// or removed: the kernel re-reads a directory's attributes for its
	// permission check after every change to it.
	// The mount table names the mount by its resolved path; resolved
	// now, since once mounted a stat of dir would wait for the loop.
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	conn, err := fuse.Mount(dir, mopts...)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	s := &Server{conn: conn, dir: dir, fs: cfs, opts: o, log: o.Logger, m: newMetrics(o.Registry), done: make(chan struct{})}
	s.goneState.init(abs)
	s.openAbort()
	s.loop.init()
	s.initFsync()
	w := s.watch()
	for i := 0; i < o.MinReaders; i++ {
		s.spawn()
	}
	go func() {
		s.wg.Wait()
		s.closeAbort()
		s.markGone()
		if w != nil {
			w.Stop()
		}
		close(s.done)
	}()
	return s, nil
}

// Done is closed when the kernel side of the mount has gone away.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err returns why serving stopped (nil after a clean unmount).
func (s *Server) Err() error { return s.err }

// Unmount detaches the mount, unless it was unmounted from outside
// already (gone.go), and waits for the request loop to end.
func (s *Server) Unmount() error {
	s.closeFlush()
	if err := s.detach(); err != nil {
		return err
	}
	<-s.done
	s.endFsyncs()
	return s.conn.Close()
}

func (s *Server) spawn() {
	s.readers.Add(1)
	s.wg.Add(1)
	go s.reader()
}

// escapeOpt escapes a mount option's value for fusermount3, which splits
// options at commas and takes a backslash to escape one (fusermount3 3.14
// keeps the backslash in the source it records).
func escapeOpt(v string) string {
	return strings.NewReplacer(`\`, `\\`, ",", `\,`).Replace(v)
}
