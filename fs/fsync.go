package fs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"bazil.org/fuse"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pbfs/pbfs/capture"
)

// A service's fsync means what the file's class says (capture.FsyncPolicy,
// set by hint plugins' rules and the mount's --fsync flags):
//
//   - local: fsync(2) of the backing file, as a plain directory would;
//   - replicated: a barrier (Options.Barrier), so the fsync returns once
//     everything written to the volume before it is durable on the ack
//     set, and the primary's disk is not synced;
//   - both: the two at once;
//   - deferred: nothing; it returns at once, and the write is durable on
//     the ack set once a later barrier covers it (a frontend's output
//     commit, which holds every response until then).
//
// A fsync that waits for a barrier is answered by the reader that read it,
// which first gets another reader reading: the thread wake-up that costs
// is then off the commit's path, where a goroutine of its own put one on
// it (a replicated 4 KiB commit with one backup: p50 0.72 -> 0.56 ms,
// docs/PERFORMANCE.md). Past maxInlineFsyncs in flight, fsyncs wait in
// goroutines of their own instead: concurrent fsyncs must not use up the
// readers, which other barriers need (their flush round makes requests of
// the mount). Barriers taken at the same time share one batch (the
// committer seals whatever is pending when a commit starts), so concurrent
// fsyncs are grouped as a database's group commit groups its log writes.
//
// A barrier that fails answers EIO: the writes may not be durable on the
// ack set (this primary was fenced, or is stopping), and a database must
// not report its commit.

// fsyncer is the state of the replicated fsyncs in flight, part of Server.
type fsyncer struct {
	ctx     context.Context // ends at unmount
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	waiting atomic.Int64 // replicated fsyncs in flight
}

// The first maxInlineFsyncs fsyncs in flight wait in the reader that read
// them; more wait in goroutines of their own, so that concurrent fsyncs
// do not use up the readers; beyond maxAsyncFsyncs they wait in their
// readers again, which the pool replaces if they take long.
const (
	maxInlineFsyncs = 2
	maxAsyncFsyncs  = 4096
)

func (s *Server) initFsync() {
	s.fsyncs.ctx, s.fsyncs.cancel = context.WithCancel(context.Background())
	// Once the connection ends nobody can take an answer: the barriers
	// fsyncs wait for fail then, so that the readers waiting in them end
	// with the others and Unmount, which waits for every reader, returns.
	go func() {
		select {
		case <-s.closing:
			s.fsyncs.cancel()
		case <-s.fsyncs.ctx.Done():
		}
	}()
}

// fsync serves FSYNC and FSYNCDIR.
func (s *Server) fsync(r *fuse.FsyncRequest) error {
	h := s.fs.Handle(uint64(r.Handle))
	if h == nil {
		return syscall.EBADF
	}
	datasync := r.Flags&1 != 0
	policy := capture.FsyncLocal
	if s.opts.Barrier != nil {
		policy = s.fs.FsyncPolicy(h.Node())
	}
	if policy == capture.FsyncDeferred {
		s.m.fsyncDeferred.Inc()
		r.Respond()
		return nil
	}
	if policy == capture.FsyncLocal {
		if err := s.fs.Fsync(h, datasync); err != nil {
			return err
		}
		r.Respond()
		return nil
	}
	s.fsyncs.wg.Add(1)
	if n := s.fsyncs.waiting.Add(1); n <= maxInlineFsyncs && n < int64(s.opts.MaxReaders) || n > maxAsyncFsyncs {
		// Served in this reader: another reader takes the connection
		// instead, so the thread wake-up that costs is not on the
		// commit's path (a goroutine of its own had to wake a thread
		// before the barrier began).
		if s.inRead.Load() == 0 {
			s.wakeOne()
		}
		s.replicatedFsync(r, h, policy, datasync)
		s.fsyncs.waiting.Add(-1)
		s.fsyncs.wg.Done()
		return nil
	}
	go func() {
		defer s.fsyncs.wg.Done()
		defer s.fsyncs.waiting.Add(-1)
		s.replicatedFsync(r, h, policy, datasync)
	}()
	return nil
}

// replicatedFsync takes a barrier (and, for both, syncs the backing file
// meanwhile) and answers r.
func (s *Server) replicatedFsync(r *fuse.FsyncRequest, h *capture.Handle, policy capture.FsyncPolicy, datasync bool) {
	start := time.Now()
	local := make(chan error, 1)
	if policy == capture.FsyncBoth {
		go func() { local <- s.fs.Fsync(h, datasync) }()
	} else {
		local <- nil
	}
	err := s.opts.Barrier(s.fsyncs.ctx)
	lerr := <-local
	s.m.fsyncBarrier.Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		s.m.fsyncFailures.Inc()
		s.log.Error("a replicated fsync's barrier failed; answering EIO", "err", err)
		r.RespondError(fuse.Errno(syscall.EIO))
	case lerr != nil:
		r.RespondError(errno(lerr))
	default:
		r.Respond()
	}
}

// endFsyncs fails the barriers replicated fsyncs still wait for and waits
// for their answers.
func (s *Server) endFsyncs() {
	s.fsyncs.cancel()
	s.fsyncs.wg.Wait()
}

func fsyncMetrics() (prometheus.Histogram, prometheus.Counter, prometheus.Counter) {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pbfs_fs_fsync_barrier_seconds",
			Help:    "How long fsyncs with the replicated or both policy waited for their barrier.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}), prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pbfs_fs_fsync_barrier_failures_total", Help: "Replicated fsyncs answered EIO because their barrier failed.",
		}), prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pbfs_fs_fsyncs_deferred_total", Help: "Fsyncs with the deferred policy, answered at once with nothing synced.",
		})
}
