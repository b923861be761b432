package capture

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/ratelog"
	"github.com/pbfs/pbfs/journal"
)

const (
	sIFDIR = unix.S_IFDIR
	sIFREG = unix.S_IFREG
	sIFLNK = unix.S_IFLNK
)

// ErrStale is returned for a node that no longer has a name or open file.
var ErrStale = errors.New("stale file")

// ErrJournalStuck fails a write that waited for room while the journal
// refused every batch for longer than StuckLimit for a reason other than
// space (an I/O error, no descriptors): it ends as EIO, where waiting on
// would keep the service's thread in an uninterruptible FUSE request.
var ErrJournalStuck = errors.New("the journal refuses every batch")

// StuckLimit is how long writes wait for room while the journal refuses
// every batch before they fail with ErrJournalStuck.
var StuckLimit = 30 * time.Second

// Options configure an FS.
type Options struct {
	// Capture records ops; with it off the FS is a plain passthrough
	// (for measuring the cost of capture).
	Capture bool
	// WriteDiff compares each write with the bytes it replaces and records
	// only the runs that changed.
	WriteDiff bool
	// MaxBatchBytes seals the open batch once it holds this much payload;
	// writers wait while twice as much is pending.
	MaxBatchBytes int64
	// Space, if set, is asked before every write and fallocate that can
	// take space, with the payload bytes captured but not yet journaled;
	// an error refuses the write with that error. The mount refuses writes
	// the journal's file system could not take on top of those bytes
	// without going below its reserve.
	Space func(unjournaled int64) error
	// Classify, if set, names local-only paths and fsync policies
	// (local.go). Only while capturing.
	Classify Classifier
	Logger   *slog.Logger
	Metrics  *Metrics
}

// FS is a captured view of one backing directory.
type FS struct {
	root  int // backing root directory fd
	opts  Options
	log   *slog.Logger
	m     *Metrics
	table *table

	sealMu sync.RWMutex
	// The open batch. ns is guarded by table.mu held exclusively, dirty by
	// dirtyMu; both are swapped under sealMu held exclusively.
	ns      []journal.Op
	reread  map[uint64]struct{} // nodes whose mtime the seal reads (mtime.go)
	dirtyMu sync.Mutex
	dirty   []*Node
	pending atomic.Int64 // payload bytes in the open batch
	sealed  atomic.Int64 // payload bytes in sealed batches not yet released
	written atomic.Int64 // bytes the service wrote into the open batch
	nsCount atomic.Int64
	// batch numbers the open batch, counting seals (Node.aclBatch).
	batch atomic.Uint64

	handles    sync.Map // uint64 -> *Handle
	nextH      atomic.Uint64
	sealSig    chan struct{} // size-triggered seal requests
	openSig    chan struct{} // the open batch took its first op
	flowMu     sync.Mutex
	flowCond   *sync.Cond
	refusedLog atomic.Int64          // unix ns of the last "refusing writes" log line
	noACL      atomic.Bool           // the backing file system has no POSIX ACLs
	backingLog *ratelog.Limiter      // "backing filesystem error" lines, per op and errno
	stopping   atomic.Pointer[error] // set by Refuse: throttled writers fail with it
	stuckSince atomic.Int64          // unix ns since the journal refused every batch (Stuck); 0: it takes them
}

// New serves the backing directory open as rootFd (the FS takes it over).
func New(rootFd int, o Options) (*FS, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = 64 << 20
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	var st unix.Stat_t
	if err := unix.Fstat(rootFd, &st); err != nil {
		return nil, fmt.Errorf("stat backing root: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, fmt.Errorf("backing root: not a directory")
	}
	f := &FS{root: rootFd, opts: o, log: o.Logger, m: o.Metrics, table: newTable(st.Ino), sealSig: make(chan struct{}, 1),
		openSig: make(chan struct{}, 1), backingLog: ratelog.New(logEvery)}
	if o.Capture {
		f.table.local = o.Classify
	}
	f.flowCond = sync.NewCond(&f.flowMu)
	return f, nil
}

// RootFd returns the backing directory's descriptor (the FS keeps it).
func (f *FS) RootFd() int { return f.root }

// Root returns the root node.
func (f *FS) Root() *Node { return f.table.root }

// Node returns the node with id, or nil.
func (f *FS) Node(id uint64) *Node { return f.table.get(id) }

// Capturing reports whether ops are recorded.
func (f *FS) Capturing() bool { return f.opts.Capture }

// SealRequests delivers a value whenever the open batch outgrows
// MaxBatchBytes.
func (f *FS) SealRequests() <-chan struct{} { return f.sealSig }

// Opened delivers a value once the open batch takes its first op, after
// Empty turns false (it may hold a stale one from a batch sealed since):
// the committer, idle until then, starts its seal timer.
func (f *FS) Opened() <-chan struct{} { return f.openSig }

func (f *FS) opened() {
	select {
	case f.openSig <- struct{}{}:
	default:
	}
}

// Stats reports the payload pending in the open batch and the number of
// nodes the table holds.
func (f *FS) Stats() (pending int64, nodes int) {
	return f.pending.Load(), f.table.count()
}

// Unjournaled is the payload captured and not yet released after its
// journal append: the open batch and the sealed batches in flight.
func (f *FS) Unjournaled() int64 { return f.pending.Load() + f.sealed.Load() }

// Close releases the backing root.
func (f *FS) Close() error { return unix.Close(f.root) }

// nodePath returns a node's current path; the caller holds table.mu.
func (f *FS) nodePath(n *Node) (string, error) {
	p, ok := f.table.path(n)
	if !ok {
		return "", ErrStale
	}
	return p, nil
}

// stat returns a node's attributes.
func (f *FS) stat(n *Node) (Attr, error) {
	var st unix.Stat_t
	f.table.mu.RLock()
	p, ok := f.table.path(n)
	var err error
	if ok {
		err = unix.Fstatat(f.root, p, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	f.table.mu.RUnlock()
	if !ok {
		fd := f.table.anyFd(n)
		if fd < 0 {
			return Attr{}, ErrStale
		}
		err = unix.Fstat(fd, &st)
	}
	if err != nil {
		return Attr{}, f.fail("stat", err)
	}
	return attrFromStat(&st), nil
}

// logEvery is how often one kind of repeating backing error is logged: a
// service that hits EMFILE in a loop gets a line saying so, not a log that
// buries everything else; the metric still counts every error.
const logEvery = 10 * time.Second

// fail counts and returns a backing error. Exhausted resources are
// logged, once per op and errno every logEvery.
func (f *FS) fail(op string, err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		switch errno {
		case unix.EMFILE, unix.ENFILE, unix.ENOSPC, unix.EDQUOT, unix.ENOMEM, unix.EIO:
			name := errnoName(errno)
			f.m.BackingErrors.WithLabelValues(op, name).Inc()
			if ok, held := f.backingLog.Allow(op+" "+name, time.Now()); ok {
				f.log.Warn("backing filesystem error", "op", op, "err", err, "similar_not_logged", held)
			}
		}
	}
	return err
}

func errnoName(e unix.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno%d", int(e))
}

// roomFor asks Options.Space whether a write that takes space may go
// ahead, counting and logging (at most every 10 s) the ones refused.
func (f *FS) roomFor(op string) error {
	if f.opts.Space == nil {
		return nil
	}
	err := f.opts.Space(f.Unjournaled())
	if err == nil {
		return nil
	}
	f.m.Refused.Inc()
	now := time.Now().UnixNano()
	if last := f.refusedLog.Load(); now-last > int64(10*time.Second) && f.refusedLog.CompareAndSwap(last, now) {
		f.log.Error("refusing writes that take space: the journal cannot take them", "op", op, "err", err)
	}
	return err
}

// begin enters a mutation: it waits while too much is pending (waitRoom),
// then holds sealMu shared until end.
func (f *FS) begin() {
	f.waitRoom("")
	f.sealMu.RLock()
}

// beginGrow is begin for a write or fallocate, op: it is refused
// (roomFor) rather than kept waiting while the journal cannot take it.
func (f *FS) beginGrow(op string) error {
	if err := f.roomFor(op); err != nil {
		return err
	}
	if err := f.waitRoom(op); err != nil {
		return err
	}
	f.sealMu.RLock()
	return nil
}

// waitRoom waits while twice MaxBatchBytes is pending, but not while the
// journal refuses writes for want of space: then a write (op set) is
// refused with roomFor's error, and any other mutation goes ahead, since
// those that take no space (unlink, truncate, rename...) must go on or
// nobody could free any.
func (f *FS) waitRoom(op string) error {
	if !f.opts.Capture || f.pending.Load() <= 2*f.opts.MaxBatchBytes {
		return nil
	}
	f.flowMu.Lock()
	defer f.flowMu.Unlock()
	for f.pending.Load() > 2*f.opts.MaxBatchBytes {
		if e := f.stopping.Load(); e != nil {
			if op != "" {
				return *e
			}
			return nil
		}
		if op != "" {
			if err := f.roomFor(op); err != nil {
				return err
			}
		} else if f.opts.Space != nil && f.opts.Space(f.Unjournaled()) != nil {
			return nil
		}
		if since := f.stuckSince.Load(); since != 0 && time.Since(time.Unix(0, since)) > StuckLimit {
			if op == "" {
				return nil // a metadata op, small: let it through
			}
			f.m.Refused.Inc()
			return fmt.Errorf("%s: %w since %s", op, ErrJournalStuck, time.Unix(0, since).UTC().Format(time.RFC3339))
		}
		f.m.Throttled.Inc()
		f.flowCond.Wait()
	}
	return nil
}

// Refuse fails, with err, every write that waits for room in the open
// batch, now and from now on: a mount being stopped while the journal
// refuses batches must not leave the service's writers waiting forever.
func (f *FS) Refuse(err error) {
	f.stopping.Store(&err)
	f.WakeWriters()
}

// Stuck records whether the journal has been refusing batches (the
// committer holds one it keeps retrying), for waitRoom.
func (f *FS) Stuck(stuck bool) {
	if !stuck {
		f.stuckSince.Store(0)
		return
	}
	f.stuckSince.CompareAndSwap(0, time.Now().UnixNano())
}

// WakeWriters lets throttled writers look again at whether they may go
// on; the committer calls it when the journal refused a batch.
func (f *FS) WakeWriters() {
	f.flowMu.Lock()
	f.flowCond.Broadcast()
	f.flowMu.Unlock()
}

func (f *FS) end() { f.sealMu.RUnlock() }

// recordNS appends a namespace op; the caller holds table.mu exclusively.
func (f *FS) recordNS(op journal.Op) {
	if !f.opts.Capture {
		return
	}
	if f.keptLocal(&op) {
		f.touched(&op) // a replicated parent's mtime changed all the same
		return
	}
	f.ns = append(f.ns, op)
	f.touched(&op)
	if f.nsCount.Add(1) == 1 {
		f.opened()
	}
	f.m.op(op.Kind)
	// Namespace ops carry no payload but still cost memory: count them
	// roughly, so a metadata storm also seals by size.
	f.grew(len(op.Path) + len(op.Path2) + len(op.Target) + 96)
}

// dataLog returns n's log in the open batch, creating it; the caller holds
// n.mu and sealMu shared.
func (f *FS) dataLog(n *Node) *journal.DataLog {
	if n.log == nil {
		n.log = &journal.DataLog{}
		f.dirtyMu.Lock()
		f.dirty = append(f.dirty, n)
		first := len(f.dirty) == 1
		f.dirtyMu.Unlock()
		if first {
			f.opened()
		}
	}
	return n.log
}

// grew accounts for payload added to the open batch.
func (f *FS) grew(delta int) {
	if delta == 0 {
		return
	}
	if f.pending.Add(int64(delta)) > f.opts.MaxBatchBytes {
		select {
		case f.sealSig <- struct{}{}:
		default:
		}
	}
}
