package fs

import (
	"sync"
	"syscall"

	"bazil.org/fuse"

	"github.com/pbfs/pbfs/capture"
)

// serveHandle answers requests on open files and extended attributes.
func (s *Server) serveHandle(req fuse.Request, n *capture.Node) error {
	switch r := req.(type) {
	case *fuse.ReadRequest:
		return s.serveRead(r)
	case *fuse.WriteRequest:
		return s.serveWrite(r)
	case *fuse.FAllocateRequest:
		h := s.fs.Handle(uint64(r.Handle))
		if h == nil {
			return syscall.EBADF
		}
		c := caller(&r.Header)
		if err := s.fs.Fallocate(h, uint32(r.Mode), r.Offset, r.Length, &c); err != nil {
			return err
		}
		s.invalidateIfCleared(h)
		s.attrsChanged(h.Node())
		r.Respond()
	case *fuse.LseekRequest:
		h := s.fs.Handle(uint64(r.Handle))
		if h == nil {
			return syscall.EBADF
		}
		off, err := s.fs.SeekData(h, r.Offset, r.Whence)
		if err != nil {
			return err
		}
		r.Respond(off)
	case *fuse.FlushRequest:
		// Nothing to do at close (no writeback cache, no POSIX locks held
		// here): ENOSYS once and the kernel stops sending FLUSH, which saves
		// a round trip on every close.
		return syscall.ENOSYS
	case *fuse.FsyncRequest:
		return s.fsync(r)
	case *fuse.ReleaseRequest:
		if r.Dir {
			s.releasedDir(uint64(r.Handle), r.ID)
		}
		if h := s.fs.Handle(uint64(r.Handle)); h != nil {
			s.released(h)
			s.fs.Release(h)
		}
		r.Respond()
	case *fuse.GetxattrRequest, *fuse.ListxattrRequest, *fuse.SetxattrRequest, *fuse.RemovexattrRequest:
		if !s.opts.Xattrs {
			return syscall.ENOSYS
		}
		return s.serveXattr(req, n)
	case *fuse.AccessRequest:
		// Sent only without default_permissions (see Mount), where every
		// caller has pbfs's own uid and gid.
		if err := s.fs.Access(n, r.Mask); err != nil {
			return err
		}
		r.Respond()
	default:
		s.log.Debug("unsupported fuse request", "req", req.String())
		return syscall.ENOSYS
	}
	return nil
}

// serveRead answers a read of a file or a directory listing.
func (s *Server) serveRead(r *fuse.ReadRequest) error {
	h := s.fs.Handle(uint64(r.Handle))
	if h == nil {
		return syscall.EBADF
	}
	if r.Dir {
		if r.Offset == 0 || h.Cache == nil {
			// A listing from the start (opendir, rewinddir) is taken
			// afresh; offsets into it stay valid until the next one.
			ents, err := s.fs.ReadDir(h)
			if err != nil {
				return err
			}
			h.Cache = direntData(ents)
		}
		data := h.Cache[min(int(max(r.Offset, 0)), len(h.Cache)):]
		r.Respond(&fuse.ReadResponse{Data: data[:min(len(data), r.Size)]})
		return nil
	}
	if r.FileFlags&openDirect == 0 {
		h.Node().MarkPaged() // before the read: see directWritten
	}
	// Read after room for the reply header, and answer from the same
	// buffer: no copy, no allocation.
	const hs = fuse.ReadHeaderSize
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	if cap(*bp) < hs+r.Size {
		*bp = make([]byte, hs+r.Size)
	}
	buf := (*bp)[:hs+r.Size]
	k, err := s.fs.Read(h, r.Offset, buf[hs:])
	if err != nil {
		return err
	}
	r.RespondPrefixed(buf[:hs+k])
	return nil
}

// serveWrite answers a write.
func (s *Server) serveWrite(r *fuse.WriteRequest) error {
	h := s.fs.Handle(uint64(r.Handle))
	if h == nil {
		return syscall.EBADF
	}
	appending := r.FileFlags&fuse.OpenAppend != 0 && r.Flags&fuse.WriteCache == 0
	direct := r.FileFlags&openDirect != 0
	if !direct {
		h.Node().MarkPaged()
	}
	k, err := s.fs.WriteAs(h, r.Offset, r.Data, killer(&r.Header, r.Flags&fuse.WriteKillSUIDGID != 0), appending)
	if direct && k > 0 {
		s.directWritten(h.Node())
	}
	if err != nil {
		return err
	}
	s.invalidateIfCleared(h) // before the reply: the writer may stat at once
	r.Respond(&fuse.WriteResponse{Size: k})
	return nil
}

// serveXattr answers the extended-attribute requests.
func (s *Server) serveXattr(req fuse.Request, n *capture.Node) error {
	switch r := req.(type) {
	case *fuse.GetxattrRequest:
		buf := make([]byte, r.Size)
		k, err := s.fs.Getxattr(n, r.Name, buf)
		if err != nil {
			return err
		}
		if r.Size == 0 {
			buf = make([]byte, k) // size probe: the kernel reads only the length
		}
		r.Respond(&fuse.GetxattrResponse{Xattr: buf[:k]})
	case *fuse.ListxattrRequest:
		buf := make([]byte, r.Size)
		k, err := s.fs.Listxattr(n, buf)
		if err != nil {
			return err
		}
		if r.Size == 0 {
			buf = make([]byte, k)
		}
		r.Respond(&fuse.ListxattrResponse{Xattr: buf[:k]})
	case *fuse.SetxattrRequest:
		if err := s.fs.Setxattr(n, r.Name, r.Xattr, int(r.Flags), r.SetxattrFlags&fuse.SetxattrACLKillSGID != 0); err != nil {
			return err
		}
		r.Respond()
	case *fuse.RemovexattrRequest:
		if err := s.fs.Removexattr(n, r.Name); err != nil {
			return err
		}
		r.Respond()
	}
	return nil
}

// readBufs recycles read buffers: the reply header and up to 128 KiB,
// the most the kernel reads at once (max_readahead).
var readBufs = sync.Pool{New: func() any { b := make([]byte, fuse.ReadHeaderSize+128<<10); return &b }}

// setattrIn translates a SetattrRequest.
func (s *Server) setattrIn(r *fuse.SetattrRequest) capture.SetattrIn {
	var in capture.SetattrIn
	v := r.Valid
	if v.Handle() {
		in.Handle = s.fs.Handle(uint64(r.Handle))
	}
	if v.Mode() {
		m := unixMode(r.Mode) & 0o7777
		in.Mode = &m
	}
	if v.Uid() {
		in.UID = &r.Uid
	}
	if v.Gid() {
		in.GID = &r.Gid
	}
	if v.Size() {
		in.Size = &r.Size
	}
	if v.Atime() && !v.AtimeNow() {
		in.Atime = &r.Atime
	}
	if v.Mtime() && !v.MtimeNow() {
		in.Mtime = &r.Mtime
	}
	in.AtimeNow, in.MtimeNow = v.AtimeNow(), v.MtimeNow()
	in.KillPriv = killer(&r.Header, v.SetattrKillSUIDGID())
	if in.Mode == nil && in.UID == nil && in.GID == nil && in.Size == nil && !v.Atime() && !v.Mtime() && !v.AtimeNow() && !v.MtimeNow() {
		// A SETATTR that changes nothing is a chown(file, -1, -1): the
		// kernel strips the setuid kill it carries and sends no field.
		c := caller(&r.Header)
		in.Chowned = &c
	}
	return in
}

// direntData serializes a directory listing; dirent offsets are byte
// offsets into it, so a read at any offset is a plain slice.
func direntData(ents []capture.Dirent) []byte {
	data := make([]byte, 0, 64*len(ents)+1)
	for _, e := range ents {
		data = fuse.AppendDirent(data, fuse.Dirent{Inode: e.Ino, Type: fuse.DirentType(e.Type), Name: e.Name})
	}
	return data
}
