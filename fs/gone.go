package fs

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"bazil.org/fuse"

	"github.com/pbfs/pbfs/internal/mountinfo"
)

// A mount can end without pbfs stopping it: umount(8) or fusermount3 -u
// from outside. Unmounted at once, the connection ends; unmounted lazily
// (umount -l), it leaves the mount table at once but serves the files
// still open on it until they are closed. Either way Gone closes as soon
// as pbfs sees it, so the mount can stop: seal, ship, and never unmount
// what is no longer its own (the mount point may hold another mount by
// then, even a new pbfs mount of the same volume).

// goneState is the part of Server that tracks its mount in the table.
type goneState struct {
	abs      string // the mount point, resolved, as the table names it
	dev      string // the mount's "major:minor" in the table ("" if unknown)
	gone     chan struct{}
	goneOnce sync.Once
	goneAt   time.Time
}

// init finds the mount that serves abs in the mount table.
func (g *goneState) init(abs string) {
	g.abs, g.gone = abs, make(chan struct{})
	if tab, err := mountinfo.Read(); err == nil {
		if m, ok := tab.At(abs); ok && m.FSType == "fuse.pbfs" {
			g.dev = m.Dev
		}
	}
}

// connID is the kernel's id of the FUSE connection: the minor device
// number of its file system (its directory in /sys/fs/fuse/connections).
func (g *goneState) connID() string {
	if _, minor, ok := strings.Cut(g.dev, ":"); ok {
		return minor
	}
	return ""
}

// markGone records the first moment the mount was seen gone.
func (g *goneState) markGone() {
	g.goneOnce.Do(func() {
		g.goneAt = time.Now()
		close(g.gone)
	})
}

// Gone is closed once the mount has left the mount table (unmounted, by
// pbfs or from outside, lazily or not) or its connection has ended.
func (g *goneState) Gone() <-chan struct{} { return g.gone }

// GoneAt returns when Gone closed; zero while the mount is in the table.
// Whatever changed the backing directory after it did not come through
// the mount.
func (g *goneState) GoneAt() time.Time {
	select {
	case <-g.gone:
		return g.goneAt
	default:
		return time.Time{}
	}
}

// watch closes Gone once no mount in the table shows the mount's file
// system. The returned watcher (nil if the table cannot be watched) is
// stopped when the connection ends.
func (s *Server) watch() *mountinfo.Watcher {
	if s.dev == "" {
		return nil
	}
	w, err := mountinfo.Watch()
	if err != nil {
		s.log.Warn("an unmount from outside is noticed only once the service closes its files", "err", err)
		return nil
	}
	go func() {
		defer w.Close()
		// Read once after Watch: an unmount before it is seen too.
		for werr := error(nil); werr == nil; werr = w.Next() {
			if tab, err := mountinfo.Read(); err == nil && !tab.WithDev(s.dev) {
				s.markGone()
				return
			}
		}
	}()
	return w
}

// detach unmounts the mount, lazily if it is busy, when it is still the
// one at its mount point.
func (s *Server) detach() error {
	if top, err := s.atPoint(); !top {
		return err
	}
	err := fuse.Unmount(s.dir)
	if err == nil {
		return nil
	}
	// Busy: detach lazily so the service's open files keep working until
	// closed, as umount -l does.
	if err2 := syscall.Unmount(s.dir, syscall.MNT_DETACH); err2 != nil {
		if top, cerr := s.atPoint(); !top && cerr == nil {
			return nil // unmounted from outside meanwhile
		}
		return fmt.Errorf("unmount %s: %w", s.dir, err)
	}
	return nil
}

// atPoint reports whether the mount is the topmost one at its mount point
// (or cannot tell): false once it is gone from the table, and false with
// an error while another mount covers it.
func (s *Server) atPoint() (bool, error) {
	if !s.GoneAt().IsZero() {
		return false, nil
	}
	tab, err := mountinfo.Read()
	if err != nil || s.dev == "" {
		return true, nil
	}
	if m, ok := tab.At(s.abs); ok && m.Dev == s.dev {
		return true, nil
	}
	if tab.WithDev(s.dev) {
		return false, fmt.Errorf("unmount %s: another mount covers it; unmount that first", s.dir)
	}
	return false, nil
}
