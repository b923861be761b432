package fs

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"bazil.org/fuse"
)

// loop is the request loop's state, part of Server.
type loop struct {
	// readMu makes taking a request off the connection and noting it in
	// the reader's slot one step, so that once a request has been read,
	// every request queued before it is visible in some slot (Flush).
	readMu    sync.Mutex
	slotsMu   sync.Mutex
	slots     map[*slot]struct{}
	served    sync.Cond // signalled when a noted request is answered, while flushWait > 0
	flushWait atomic.Int32
	readers   atomic.Int32
	inRead    atomic.Int32  // readers blocked in read(2) on /dev/fuse
	wake      chan struct{} // a parked reader takes a send and reads
	closing   chan struct{} // closed when the connection ends
	closeOnce sync.Once
	lastPid   atomic.Uint32 // the caller of the last request
	lastAt    atomic.Int64  // and when it came (unix ns)
	poolUntil atomic.Int64  // several callers seen: pool mode until then
}

func (l *loop) init() {
	l.wake, l.closing = make(chan struct{}), make(chan struct{})
	l.slots = map[*slot]struct{}{}
	l.served.L = &l.slotsMu
}

// slot holds the request a reader is serving, if a barrier must wait for
// it: a WRITE, or a SETATTR that sets the size (the kernel holds
// write-back of that file back until it is answered). It holds the
// kernel's request id shifted left, with bit 0 set for a SETATTR; 0 when
// idle.
type slot struct{ v atomic.Uint64 }

// note records req in sl if a Flush must wait for it.
func (sl *slot) note(req fuse.Request) {
	switch r := req.(type) {
	case *fuse.WriteRequest:
		sl.v.Store(uint64(r.Hdr().ID) << 1)
	case *fuse.SetattrRequest:
		if r.Valid.Size() {
			sl.v.Store(uint64(r.Hdr().ID)<<1 | 1)
		}
	}
}

// answered clears sl after its request was answered.
func (l *loop) answered(sl *slot) {
	if sl.v.Load() == 0 {
		return
	}
	sl.v.Store(0)
	if l.flushWait.Load() > 0 {
		l.slotsMu.Lock()
		l.served.Broadcast()
		l.slotsMu.Unlock()
	}
}

// waitServed waits until no reader serves a noted request read before the
// request with kernel id fence, and reports whether one of those was a
// truncating SETATTR.
func (l *loop) waitServed(fence uint64) bool {
	l.flushWait.Add(1)
	defer l.flushWait.Add(-1)
	l.slotsMu.Lock()
	defer l.slotsMu.Unlock()
	truncated := false
	for {
		busy := false
		for sl := range l.slots {
			if v := sl.v.Load(); v != 0 && v>>1 < fence {
				busy = true
				truncated = truncated || v&1 != 0
			}
		}
		if !busy {
			return truncated
		}
		l.served.Wait()
	}
}

func (l *loop) addSlot() *slot {
	sl := &slot{}
	l.slotsMu.Lock()
	l.slots[sl] = struct{}{}
	l.slotsMu.Unlock()
	return sl
}

func (l *loop) dropSlot(sl *slot) {
	l.slotsMu.Lock()
	delete(l.slots, sl)
	l.served.Broadcast()
	l.slotsMu.Unlock()
}

// handoffAfter is how long a request may keep the only reader busy before
// another reader starts reading. It is longer than a typical local fsync
// (0.1-0.5 ms), so one caller's fsyncs are served by one thread too: at
// 50 us every fsync brought in a second thread that then parked again, and
// SQLite's commits ran 13 % slower on this machine's ext4 and 10 % slower on
// a journaled ext4 (docs/PERFORMANCE.md). A caller that arrives while the
// only reader is busy waits at most this long before someone reads its
// request; once requests from several callers interleave, the loop keeps a
// second reader reading anyway (concurrent).
const handoffAfter = 500 * time.Microsecond

// serveHook, when set (by tests), runs before each request is served.
var serveHook func(fuse.Request)

// reader reads and handles requests until the connection ends.
//
// One reader at a time waits in read(2), and while one caller uses the
// mount, the reader that answered a request reads the next one itself:
// the caller's requests are served back to back by one thread, on the
// vCPU the caller runs on. With a pool of readers all waiting in read(2),
// each request woke another thread, usually one that had last run on the
// other vCPU; on fdatasync'd 4 KiB writes that cost a tenth of a plain
// directory's speed (docs/PERFORMANCE.md). A request that keeps the reader
// busy longer than handoffAfter gets another reader reading (a parked
// one, or a new one up to MaxReaders), so a slow request never stalls the
// others; and while several callers use the mount at once, the loop keeps
// a second reader reading at all times, as a pool does. A reader that
// finishes while another one is reading parks.
//
// Only the end of the connection stops a reader. read(2) on /dev/fuse
// fails with ENOENT when the kernel withdrew an interrupted request before
// we read it (signals make that common), and with EINTR or EAGAIN; a reader
// that gave up on those would leave the mount with nobody reading, and
// every caller hung.
func (s *Server) reader() {
	defer s.wg.Done()
	defer s.readers.Add(-1)
	t := time.AfterFunc(time.Hour, s.takeOver)
	t.Stop()
	defer t.Stop()
	sl := s.addSlot()
	defer s.dropSlot(sl)
	for {
		s.inRead.Add(1)
		s.readMu.Lock()
		req, err := s.conn.ReadRequest()
		if err == nil {
			sl.note(req)
		}
		s.readMu.Unlock()
		left := s.inRead.Add(-1)
		if err != nil {
			switch {
			case connectionEnded(err):
				s.closeOnce.Do(func() {
					if errors.Is(err, syscall.ECONNABORTED) {
						s.log.Warn("the FUSE connection was aborted through fusectl: no request comes again")
					}
					close(s.closing)
				})
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
		if left == 0 {
			if s.concurrent(callerOf(req)) {
				s.wakeOne()
			} else {
				t.Reset(handoffAfter)
			}
		}
		if serveHook != nil {
			serveHook(req)
		}
		if truncateDelay > 0 && sl.v.Load()&1 != 0 {
			time.Sleep(truncateDelay) // failpoint: a truncate in flight
		}
		s.serve(req)
		s.answered(sl)
		t.Stop()
		if s.inRead.Load() > 0 {
			select {
			case <-s.wake:
			case <-s.closing:
				return
			}
		}
	}
}

// concurrent reports whether several callers are using the mount at
// once: requests from different threads less than a millisecond apart
// switch the loop to keeping a second reader reading for the next 10 ms,
// as a pool does, so one caller's fsync does not hold up the others.
func (s *loop) concurrent(pid uint32) bool {
	now := time.Now().UnixNano()
	if pid != 0 {
		prev := s.lastPid.Swap(pid)
		prevAt := s.lastAt.Swap(now)
		if prev != 0 && prev != pid && now-prevAt < int64(time.Millisecond) {
			s.poolUntil.Store(now + int64(10*time.Millisecond))
		}
	}
	return now < s.poolUntil.Load()
}

// callerOf returns the thread a request counts as for concurrent: none
// (0) for an OPENDIR of the root, which is how a flush round starts. The
// flush helper makes it while the service's thread that asked for the
// barrier waits, not alongside that thread's requests, and a single
// writer taking barriers would otherwise keep the loop in pool mode, one
// reader woken per request (its RELEASEDIR carries no caller already).
func callerOf(req fuse.Request) uint32 {
	if r, ok := req.(*fuse.OpenRequest); ok && r.Dir && r.Node == fuse.RootID {
		return 0
	}
	return req.Hdr().Pid
}

// takeOver runs when a request has kept the only reader busy too long.
func (s *Server) takeOver() {
	if s.inRead.Load() == 0 {
		s.wakeOne()
	}
}

// wakeOne gets another reader reading: a parked one, else a new one.
func (s *Server) wakeOne() {
	s.m.readerWakes.Inc()
	select {
	case s.wake <- struct{}{}:
		return
	default:
	}
	if s.readers.Load() < int32(s.opts.MaxReaders) {
		s.spawn()
	}
}

// connectionEnded reports whether a read of /dev/fuse failed because the
// connection is over: unmounted (ENODEV, or EOF), the device closed
// (EBADF), or aborted through fusectl (ECONNABORTED, where the connection
// asked for abort errors). Every later read fails the same way.
func connectionEnded(err error) bool {
	return err == io.EOF || errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.EBADF) ||
		errors.Is(err, syscall.ECONNABORTED)
}
