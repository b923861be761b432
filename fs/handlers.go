package fs

import (
	"errors"
	"os"
	"syscall"

	"bazil.org/fuse"

	"github.com/pbfs/pbfs/capture"
)

// serve answers one request.
func (s *Server) serve(req fuse.Request) {
	s.m.requests[reqKind(req)].Inc()
	hdr := req.Hdr()
	switch r := req.(type) {
	case *fuse.ForgetRequest:
		if n := s.fs.Node(uint64(hdr.Node)); n != nil {
			s.fs.Forget(n, r.N)
		}
		r.Respond()
		return
	case *fuse.BatchForgetRequest:
		for _, it := range r.Forget {
			if n := s.fs.Node(uint64(it.NodeID)); n != nil {
				s.fs.Forget(n, it.N)
			}
		}
		r.Respond()
		return
	case *fuse.InterruptRequest:
		r.Respond()
		return
	case *fuse.StatfsRequest:
		st, err := s.fs.Statfs()
		if err != nil {
			r.RespondError(errno(err))
			return
		}
		r.Respond(&fuse.StatfsResponse{Blocks: st.Blocks, Bfree: st.Bfree, Bavail: st.Bavail, Files: st.Files,
			Ffree: st.Ffree, Bsize: uint32(st.Bsize), Namelen: uint32(st.Namelen), Frsize: uint32(st.Frsize)})
		return
	case *fuse.DestroyRequest:
		r.Respond()
		return
	case *fuse.PollRequest:
		// ENOSYS once and the kernel stops polling on every open.
		r.RespondError(fuse.Errno(syscall.ENOSYS))
		return
	}
	if r, ok := req.(*fuse.LookupRequest); ok && (r.Name == "." || r.Name == "..") {
		s.lookupDot(r)
		return
	}
	n := s.fs.Node(uint64(hdr.Node))
	if n == nil {
		req.RespondError(fuse.Errno(syscall.ESTALE))
		return
	}
	if err := s.serveNode(req, n); err != nil {
		req.RespondError(errno(err))
	}
}

// lookupDot answers the LOOKUP of "." or ".." in a node given by id
// alone, which the kernel sends only to resolve a file handle
// (open_by_handle_at) once it has dropped the inode, or a directory's
// parent to connect one: the node itself, which the table may have
// evicted, or its parent.
func (s *Server) lookupDot(r *fuse.LookupRequest) {
	var c *capture.Node
	var a capture.Attr
	var err error
	if r.Name == "." {
		c, a, err = s.fs.LookupID(uint64(r.Node))
	} else if n := s.fs.Node(uint64(r.Node)); n == nil {
		err = capture.ErrStale
	} else {
		c, a, err = s.fs.LookupParent(n)
	}
	if err != nil {
		r.RespondError(errno(err))
		return
	}
	resp := entry(c, a)
	r.Respond(&resp)
}

func caller(h *fuse.Header) capture.Caller {
	return capture.Caller{UID: h.Uid, GID: h.Gid, PID: h.Pid}
}

// creator is the caller of a create-kind request, with its umask: the
// kernel applies it only when the mount has no POSIX ACLs (capture
// applies it otherwise, unless a default ACL replaces it).
func creator(h *fuse.Header, umask os.FileMode) capture.Caller {
	c := caller(h)
	c.Umask = uint32(umask.Perm())
	return c
}

// killer is the caller whose write or truncate must clear setuid and
// setgid, when the kernel asks (kill), else nil.
func killer(h *fuse.Header, kill bool) *capture.Caller {
	if !kill {
		return nil
	}
	c := caller(h)
	return &c
}

// invalidateIfCleared drops the kernel's cached attributes of h's file
// when capture cleared setuid or setgid on it: a statx asking only for the
// mode would otherwise see the old mode until the cache timed out. Only
// the attributes (the page cache stays), so it waits for nothing and is
// safe before the reply, where it must be: the caller may stat as soon as
// its write returns.
func (s *Server) invalidateIfCleared(h *capture.Handle) {
	if h.Cleared() {
		if err := s.conn.InvalidateNode(fuse.NodeID(h.Node().ID()), -1, -1); err != nil && !errors.Is(err, fuse.ErrNotCached) {
			s.log.Warn("invalidate attributes after clearing setuid", "err", err)
		}
	}
}

// openDirect is O_DIRECT in a request's open flags.
const openDirect = fuse.OpenFlags(syscall.O_DIRECT)

// directWritten drops the kernel's cached pages of n after a write
// through an O_DIRECT file, before the reply. The kernel drops the pages
// a direct write covers before it sends the write, and for a synchronous
// write again after it; an asynchronous one (io_submit) it completes
// without, so pages that a buffered reader read in meanwhile, holding the
// old data, would stay cached, and with FOPEN_KEEP_CACHE every later
// buffered read through any open would return them (xfstests
// generic/451). The request loop marks a file before it serves a read or
// write through the page cache, so a reader that read old data marked
// the file before this write landed: only a file the kernel may cache
// pages of costs the notification, a file written only with O_DIRECT (a
// database's) never does. All of the file's pages go, not only this
// write's: the write that finds the mark clears it for the other writes
// in flight with it. The invalidation waits for pages locked by reads in
// flight, which other readers of the loop answer; it holds no lock of
// capture's.
func (s *Server) directWritten(n *capture.Node) {
	if !n.TakePaged() {
		return
	}
	if err := s.conn.InvalidateNode(fuse.NodeID(n.ID()), 0, -1); err != nil && !errors.Is(err, fuse.ErrNotCached) {
		s.log.Warn("invalidate cached pages after a direct write", "err", err)
	}
}

// attrsChanged drops the kernel's cached attributes of node n, a
// directory whose entries the request being served just changed or a file
// fallocate changed, before the reply. For these the kernel marks the
// attributes stale itself only once the reply arrives, and a lookup or
// getattr that pbfs answered before the change, but that the kernel takes
// in after that mark, puts the old mtime and size back in its cache for
// cacheValid: a stat right after the change saw the node as it was
// before (one round in five of a create-and-unlink loop with concurrent
// stats; also after a hole punched). The notification also advances the
// inode's attribute version (since Linux 5.10; before, it only narrows
// the window), so such an answer, asked for before it, is no longer
// cached at all; one asked for after it is answered after the
// change. (After a write or a truncate the kernel advances the version
// itself.) Only the attributes are dropped (offset -1: no pages), which
// waits for no lock the caller holds.
func (s *Server) attrsChanged(n *capture.Node) {
	if err := s.conn.InvalidateNode(fuse.NodeID(n.ID()), -1, -1); err != nil && !errors.Is(err, fuse.ErrNotCached) {
		s.log.Warn("invalidate changed attributes", "err", err)
	}
}

// serveNode answers a request addressed to node n; an error return is
// answered as an errno.
func (s *Server) serveNode(req fuse.Request, n *capture.Node) error {
	switch r := req.(type) {
	case *fuse.LookupRequest:
		c, a, err := s.fs.Lookup(n, r.Name)
		if errors.Is(err, syscall.ENOENT) {
			// A negative entry: the kernel remembers the name is missing
			// as long as it would a positive one. Only this mount creates
			// names, and the kernel replaces the entry when it does.
			r.Respond(&fuse.LookupResponse{EntryValid: cacheValid})
			return nil
		}
		if err != nil {
			return err
		}
		resp := entry(c, a)
		r.Respond(&resp)
	case *fuse.GetattrRequest:
		var h *capture.Handle
		if r.Flags&fuse.GetattrFh != 0 {
			h = s.fs.Handle(uint64(r.Handle))
		}
		a, err := s.fs.Getattr(n, h)
		if err != nil {
			return err
		}
		r.Respond(&fuse.GetattrResponse{Attr: fuseAttr(a)})
	case *fuse.SetattrRequest:
		a, err := s.fs.Setattr(n, s.setattrIn(r))
		if err != nil {
			return err
		}
		r.Respond(&fuse.SetattrResponse{Attr: fuseAttr(a)})
	case *fuse.ReadlinkRequest:
		t, err := s.fs.Readlink(n)
		if err != nil {
			return err
		}
		r.Respond(t)
	case *fuse.MkdirRequest, *fuse.MknodRequest, *fuse.SymlinkRequest, *fuse.LinkRequest, *fuse.RemoveRequest, *fuse.RenameRequest, *fuse.CreateRequest:
		return s.serveNames(req, n)
	case *fuse.OpenRequest:
		h, err := s.fs.Open(n, int(r.Flags), killer(&r.Header, r.OpenFlags&fuse.OpenKillSUIDGID != 0))
		if err != nil {
			return err
		}
		if r.Dir {
			s.openedDir(n, h, &r.Header)
		}
		s.opened(h)
		// Keep the page cache across opens: every write, truncate and hole
		// punch reaches the file through this mount, which keeps the
		// kernel's cached pages current, so a file read again (a PHP
		// script, a config file) costs no READ.
		s.invalidateIfCleared(h)
		r.Respond(&fuse.OpenResponse{Handle: fuse.HandleID(h.ID()), Flags: fuse.OpenKeepCache})
	default:
		return s.serveHandle(req, n)
	}
	return nil
}

// serveNames answers the requests that add, remove or move a name in the
// directory n.
func (s *Server) serveNames(req fuse.Request, n *capture.Node) error {
	switch r := req.(type) {
	case *fuse.MkdirRequest:
		c, a, err := s.fs.Mkdir(n, r.Name, unixMode(r.Mode), creator(&r.Header, r.Umask))
		if err != nil {
			return err
		}
		s.attrsChanged(n)
		r.Respond(&fuse.MkdirResponse{LookupResponse: entry(c, a)})
	case *fuse.MknodRequest:
		c, a, err := s.fs.Mknod(n, r.Name, unixMode(r.Mode), uint64(r.Rdev), creator(&r.Header, r.Umask))
		if err != nil {
			return err
		}
		s.attrsChanged(n)
		resp := entry(c, a)
		r.Respond(&resp)
	case *fuse.SymlinkRequest:
		c, a, err := s.fs.Symlink(n, r.NewName, r.Target, caller(&r.Header))
		if err != nil {
			return err
		}
		s.attrsChanged(n)
		r.Respond(&fuse.SymlinkResponse{LookupResponse: entry(c, a)})
	case *fuse.LinkRequest:
		old := s.fs.Node(uint64(r.OldNode))
		if old == nil {
			return syscall.ESTALE
		}
		a, err := s.fs.Link(old, n, r.NewName)
		if err != nil {
			return err
		}
		s.attrsChanged(n)
		resp := entry(old, a)
		r.Respond(&resp)
	case *fuse.RemoveRequest:
		if err := s.fs.Remove(n, r.Name, r.Dir); err != nil {
			return err
		}
		s.attrsChanged(n)
		r.Respond()
	case *fuse.RenameRequest:
		np := s.fs.Node(uint64(r.NewDir))
		if np == nil {
			return syscall.ESTALE
		}
		if err := s.fs.Rename(n, r.OldName, np, r.NewName, r.Flags); err != nil {
			return err
		}
		s.attrsChanged(n)
		if np != n {
			s.attrsChanged(np)
		}
		r.Respond()
	case *fuse.CreateRequest:
		c, h, a, err := s.fs.Create(n, r.Name, int(r.Flags), unixMode(r.Mode), creator(&r.Header, r.Umask), r.OpenFlags&fuse.OpenKillSUIDGID != 0)
		if err != nil {
			return err
		}
		s.attrsChanged(n)
		s.opened(h)
		r.Respond(&fuse.CreateResponse{LookupResponse: entry(c, a), OpenResponse: fuse.OpenResponse{Handle: fuse.HandleID(h.ID()), Flags: fuse.OpenKeepCache}})
	}
	return nil
}
