package fs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"bazil.org/fuse"

	"github.com/pbfs/pbfs/capture"
)

// A store through a writable shared mapping changes only the kernel's
// page cache: pbfs sees it as a WRITE when the kernel writes the page
// back, on msync, fsync or close, or on its own 10-30 s later. A barrier
// must cover it all the same (invariant 2), so before a barrier seals,
// Flush has the kernel write back every dirty page of the mount and waits
// until those WRITEs have been answered, and so captured.
//
// syncfs(2) starts the write-back: when it returns, a WRITE for every page
// that was dirty is queued to the FUSE connection. Since Linux 6.15 it no
// longer waits for a FUSE file system's WRITEs to be answered, so Flush
// then sends itself a fence: the descriptor of the mount's root it ran
// syncfs on is closed (by the helper process that does both, never by the
// daemon itself: flushhelper.go), and the RELEASEDIR that queues travels
// behind those WRITEs (the kernel queues background requests, write-back and releases
// alike, first in first out). Readers take requests off the queue one at a
// time and note the WRITEs and truncating SETATTRs they serve (loop.go), so
// once the fence is read, every WRITE queued before it is known, and Flush
// waits for those to finish. A WRITE held back by a truncate in flight is
// queued only when the truncate ends; a fence that had to wait for one is
// followed by another round.
//
// Only a file open for reading and writing can be mapped writable and
// shared (mmap(2) wants both), and a mapping keeps its file open (no
// RELEASE until munmap): while no such handle is open there is nothing to
// write back, and Flush returns at once. A round costs about 0.1-0.3 ms
// (three wake-ups across two processes), so a service that writes through
// O_WRONLY or O_APPEND descriptors does not pay it.

// ErrUnmounted fails a Flush once the mount is being taken down.
var ErrUnmounted = errors.New("flush: the mount is being unmounted")

// flusher groups concurrent Flush calls: a round that started after a
// caller asked covers it.
type flusher struct {
	asked    atomic.Uint64 // Flush calls so far
	mappable atomic.Int64  // handles open for reading and writing

	mu   sync.Mutex // one round at a time; guards done and err
	done uint64     // asked, as read when the last finished round started
	err  error      // that round's result

	closed atomic.Bool
	helper flushHelper // does a round's syscalls on the mount (flushhelper.go)

	fences sync.Map                    // handle id of a fence opendir -> struct{}
	passed atomic.Pointer[chan uint64] // gets the kernel id of the fence's RELEASEDIR
}

// maxFlushRounds bounds the rounds a Flush makes while truncates are in
// flight (writeBack).
const maxFlushRounds = 4

// opened and released count the handles that could be mapped writable.
func (s *Server) opened(h *capture.Handle) {
	if h.Mappable() {
		s.flush.mappable.Add(1)
	}
}

func (s *Server) released(h *capture.Handle) {
	if h.Mappable() {
		s.flush.mappable.Add(-1)
	}
}

// Flush returns once every page the kernel held dirty for this mount when
// it was called has been written back through the mount (and captured).
// It gives up when ctx ends; the write-back itself goes on.
func (s *Server) Flush(ctx context.Context) error {
	if s.flush.mappable.Load() == 0 {
		return nil
	}
	start := time.Now()
	ticket := s.flush.asked.Add(1)
	res := make(chan error, 1)
	go func() { res <- s.flushRound(ticket) }()
	select {
	case err := <-res:
		s.m.flushWait.Observe(time.Since(start).Seconds())
		return err
	case <-ctx.Done():
		return fmt.Errorf("flush: %w", ctx.Err())
	}
}

func (s *Server) flushRound(ticket uint64) error {
	f := &s.flush
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done >= ticket {
		return f.err // a round that started after this call has finished
	}
	start := f.asked.Load()
	err := s.writeBack()
	f.done, f.err = start, err
	if err != nil {
		s.m.flushFailures.Inc()
		s.log.Error("a barrier could not write back the mount's dirty pages", "err", err)
	}
	return err
}

// writeBack runs syncfs and fences until no truncate held write-back
// back.
//
// A page that was dirty when Flush was called is either queued by the
// first round's syncfs, or held back because a truncate of its file was
// in flight then (the kernel queues such WRITEs when the truncate is
// answered). The second round covers those. A truncate a later round sees
// started after the first round's syncfs had queued its file's pages, so
// it holds none of the pages Flush must cover (a second truncate of the
// same file cannot start before the first one's held WRITEs were
// answered: the kernel waits for them). Rounds after the second therefore
// only narrow one window: a truncate that took hold of its file just
// before the first round's syncfs but whose SETATTR was queued after that
// round's fence. Under a steady stream of truncates they would never end,
// so they stop at maxFlushRounds and the barrier goes on; with
// 3 writers truncating in a loop the old rule (fail after four rounds)
// failed barriers on a busy machine.
func (s *Server) writeBack() error {
	for round := 1; ; round++ {
		fence, err := s.syncAndFence()
		if err != nil {
			return err
		}
		if !s.waitServed(fence) {
			return nil
		}
		if round == maxFlushRounds {
			s.m.flushCapped.Inc()
			return nil
		}
		s.m.flushRepeated.Inc()
	}
}

// syncAndFence starts write-back of the whole mount and returns the kernel
// id of a request queued behind it. The root is opened for each round and
// never held between them: a descriptor held open would keep the mount
// busy, and an operator's umount would fail.
func (s *Server) syncAndFence() (uint64, error) {
	if s.flush.closed.Load() || !s.GoneAt().IsZero() {
		// Gone from the table, the mount point is no longer this mount.
		return 0, ErrUnmounted
	}
	passed := make(chan uint64, 1)
	s.flush.passed.Store(&passed)
	// Done by the helper process (flushhelper.go): the request loop
	// answers its OPENDIR like any caller's, and marks the handle a fence
	// (openedDir).
	if err := s.flush.helper.round(s.dir); err != nil {
		return 0, fmt.Errorf("flush: write back the mount's dirty pages: %w", err)
	}
	select {
	case id := <-passed:
		return id, nil
	case <-s.closing:
		return 0, ErrUnmounted
	case <-s.gone:
		return 0, ErrUnmounted
	}
}

// openedDir marks an OPENDIR of the root by the flush helper as a fence.
func (s *Server) openedDir(n *capture.Node, h *capture.Handle, hdr *fuse.Header) {
	if n.ID() == capture.RootID && s.flush.helper.owns(hdr.Pid) {
		s.flush.fences.Store(h.ID(), struct{}{})
		if fenceDelay > 0 {
			time.Sleep(fenceDelay) // failpoint: hold the fence's OPENDIR unanswered
		}
	}
}

// releasedDir notes that a fence's RELEASEDIR has been read.
func (s *Server) releasedDir(handle uint64, id fuse.RequestID) {
	if _, ok := s.flush.fences.LoadAndDelete(handle); !ok {
		return
	}
	if ch := s.flush.passed.Load(); ch != nil {
		select {
		case *ch <- uint64(id):
		default:
		}
	}
}

// closeFlush refuses further rounds and ends the helper before unmounting
// (a round holds the mount's root open for a moment).
func (s *Server) closeFlush() {
	s.flush.closed.Store(true)
	go s.flush.helper.stop() // it may be waiting for a round in flight
}
