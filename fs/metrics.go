package fs

import (
	"bazil.org/fuse"
	"github.com/prometheus/client_golang/prometheus"
)

// Requests from the kernel, counted by kind in pbfs_fs_requests_total:
// every one is a round trip some caller waited for (or, for release and
// forget, one the daemon spent time on), so the counts say what a
// workload costs the mount.
const (
	reqOther = iota
	reqLookup
	reqForget
	reqGetattr
	reqSetattr
	reqReadlink
	reqMkdir
	reqMknod
	reqSymlink
	reqLink
	reqRemove
	reqRename
	reqCreate
	reqOpen
	reqRead
	reqWrite
	reqFsync
	reqFlush
	reqRelease
	reqGetxattr
	reqListxattr
	reqSetxattr
	reqRemovexattr
	reqAccess
	reqFallocate
	reqStatfs
	reqInterrupt
	reqLseek
	nReqKinds
)

var reqNames = [nReqKinds]string{
	"other", "lookup", "forget", "getattr", "setattr", "readlink", "mkdir", "mknod", "symlink",
	"link", "remove", "rename", "create", "open", "read", "write", "fsync", "flush", "release",
	"getxattr", "listxattr", "setxattr", "removexattr", "access", "fallocate", "statfs", "interrupt", "lseek",
}

// reqKind classifies a request for the counters.
func reqKind(req fuse.Request) int {
	switch req.(type) {
	case *fuse.LookupRequest:
		return reqLookup
	case *fuse.ForgetRequest, *fuse.BatchForgetRequest:
		return reqForget
	case *fuse.GetattrRequest:
		return reqGetattr
	case *fuse.SetattrRequest:
		return reqSetattr
	case *fuse.ReadlinkRequest:
		return reqReadlink
	case *fuse.MkdirRequest:
		return reqMkdir
	case *fuse.MknodRequest:
		return reqMknod
	case *fuse.SymlinkRequest:
		return reqSymlink
	case *fuse.LinkRequest:
		return reqLink
	case *fuse.RemoveRequest:
		return reqRemove
	case *fuse.RenameRequest:
		return reqRename
	case *fuse.CreateRequest:
		return reqCreate
	case *fuse.OpenRequest:
		return reqOpen
	case *fuse.ReadRequest:
		return reqRead
	case *fuse.WriteRequest:
		return reqWrite
	case *fuse.FsyncRequest:
		return reqFsync
	case *fuse.FlushRequest:
		return reqFlush
	case *fuse.ReleaseRequest:
		return reqRelease
	case *fuse.GetxattrRequest:
		return reqGetxattr
	case *fuse.ListxattrRequest:
		return reqListxattr
	case *fuse.SetxattrRequest:
		return reqSetxattr
	case *fuse.RemovexattrRequest:
		return reqRemovexattr
	case *fuse.AccessRequest:
		return reqAccess
	case *fuse.FAllocateRequest:
		return reqFallocate
	case *fuse.StatfsRequest:
		return reqStatfs
	case *fuse.InterruptRequest:
		return reqInterrupt
	case *fuse.LseekRequest:
		return reqLseek
	}
	return reqOther
}

// metrics are the request loop's counters, one child per kind resolved
// up front so counting costs an atomic add.
type metrics struct {
	requests      [nReqKinds]prometheus.Counter
	flushFailures prometheus.Counter
	flushRepeated prometheus.Counter
	flushCapped   prometheus.Counter
	flushWait     prometheus.Histogram
	fsyncBarrier  prometheus.Histogram
	fsyncFailures prometheus.Counter
	fsyncDeferred prometheus.Counter
	readerWakes   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pbfs_fs_requests_total", Help: "FUSE requests the kernel sent the mount, by kind.",
	}, []string{"op"})
	m := &metrics{flushFailures: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pbfs_fs_flush_failures_total", Help: "Barriers that could not have the kernel write back the mount's dirty pages first.",
	})}
	m.flushRepeated = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pbfs_fs_flush_rounds_repeated_total", Help: "Flush rounds that had to be followed by another because a truncate was in flight.",
	})
	m.flushCapped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pbfs_fs_flush_rounds_capped_total", Help: "Flushes that stopped at the round limit with a truncate still in flight (docs/ARCHITECTURE.md).",
	})
	m.flushWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "pbfs_fs_flush_seconds",
		Help:    "How long barriers waited for the kernel to write back the mount's dirty pages (only while a file is open read-write).",
		Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16),
	})
	m.fsyncBarrier, m.fsyncFailures, m.fsyncDeferred = fsyncMetrics()
	m.readerWakes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pbfs_fs_reader_wakeups_total",
		Help: "Readers woken or started so that one reads while another serves: after a slow request, and for every request while several callers use the mount (each a thread wake-up).",
	})
	for k, name := range reqNames {
		m.requests[k] = vec.WithLabelValues(name)
	}
	if reg != nil {
		reg.MustRegister(vec, m.flushFailures, m.flushRepeated, m.flushCapped, m.flushWait, m.fsyncBarrier, m.fsyncFailures, m.fsyncDeferred, m.readerWakes)
	}
	return m
}
