package journal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// batchLog keeps the journal's batches: segment files (segment.go) in one
// directory and an index of them in memory, rebuilt by scanning the
// segments at open. Writes (append, sync) are serialized by the caller;
// reads may run alongside them.
type batchLog struct {
	dir     string
	ro      bool
	log     *slog.Logger
	segSize int64              // segmentSizeFor the file system
	room    func(n int64) bool // whether n bytes may be preallocated; nil: never

	mu    sync.RWMutex // guards segs, index, first and segments' files
	segs  []*segFile   // oldest first
	index []recLoc     // index[i] is seq first+i
	first uint64
	hot   recent // the newest bodies appended (recent.go)

	wmu      sync.Mutex // serializes writes and syncs
	w        *os.File   // the newest segment, open for writing; changed under mu and wmu
	wseg     *segFile   // changed under mu and wmu
	wcap     int64      // w's size: where its preallocation ends; under mu and wmu
	wlimit   int64      // where w's segment ends: an append past it rotates; under wmu
	kicked   int64      // offset in w up to which write-back was started
	dirDirty bool       // a segment was named since dir was last synced

	// notes says what the open found besides whole records, and damaged
	// whether any of it is more than the torn append a crash leaves.
	notes   []string
	damaged bool

	// damage, if set, is told of the batches a read found damaged.
	damage func(first, last uint64, path string)

	spare  *spare
	direct *directTail // synced appends' O_DIRECT path (direct.go); nil: none
	// rotations counts segments started (a new segment's preallocation
	// changes what the file system and the log's slack add up to).
	rotations atomic.Uint64
}

// openBatchLog opens the log in dir (which must exist), cutting a torn
// tail off its newest segment unless ro.
func openBatchLog(dir string, ro bool, log *slog.Logger, room func(int64) bool) (*batchLog, error) {
	l := &batchLog{dir: dir, ro: ro, log: log, segSize: segmentSizeFor(fsSize(dir)), room: room, spare: newSpare(dir, log, room), direct: newDirectTail()}
	segs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	for i, seg := range segs {
		locs, err := scanSegment(seg, i == len(segs)-1)
		if err != nil {
			return nil, err
		}
		if len(l.index) > 0 && seg.first != l.first+uint64(len(l.index)) {
			// Segments before a gap are leftovers of a trim a crash
			// interrupted (or damage): the log is the newest run.
			log.Warn("journal: dropping segments before a gap in the batch log", "dropped_to", l.first+uint64(len(l.index))-1, "next", seg.first)
			l.notes = append(l.notes, fmt.Sprintf("batches %d-%d are left out: the next segment starts at batch %d (a trim a crash cut short, or damage)",
				l.first, l.first+uint64(len(l.index))-1, seg.first))
			l.segs, l.index = nil, nil
		}
		if seg.tail != "" {
			// Only the newest segment can end in a torn append: the log
			// synced every other one before it moved on.
			l.notes = append(l.notes, seg.tail)
			l.damaged = l.damaged || seg.damaged || i < len(segs)-1
		}
		if len(l.index) == 0 {
			l.first = seg.first
		}
		l.segs = append(l.segs, seg)
		l.index = append(l.index, locs...)
	}
	if l.damaged && !ro {
		// A power loss can tear one batch of a group appended in one write
		// and keep the next; nothing told from that was ever acked, so
		// the log is cut at the torn batch, as for any torn append.
		log.Error("journal: the batch log is damaged or was torn by a power loss; cutting it at the first bad record", "found", strings.Join(l.notes, "; "))
	}
	if n := len(l.segs); n > 0 && l.segs[n-1].n == 0 && !ro {
		// A crash right after the log moved on left the newest segment
		// empty, named for an append that never landed: the next append
		// may carry another seq (a Put, a chain that starts over) and
		// must start its own.
		if err := os.Remove(l.segs[n-1].path); err != nil {
			return nil, fmt.Errorf("open batch log: %w", err)
		}
		l.segs = l.segs[:n-1]
	}
	if !ro {
		l.spare.load() // before reopenTail, which may start making one
	}
	if len(l.segs) > 0 && !ro {
		if err := l.reopenTail(); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// reopenTail opens the newest segment for appends. What lies past its
// last record (a torn write, records a crash left behind a hole) is cut
// off first: a later record written there must never be followed by one
// of the file's earlier life that happens to carry the next seq.
func (l *batchLog) reopenTail() error {
	seg := l.segs[len(l.segs)-1]
	f, err := os.OpenFile(seg.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open batch log: %w", err)
	}
	st, err := f.Stat()
	truncated := false
	if err == nil && st.Size() > seg.end && seg.damaged {
		err = l.keepCut(f, seg, st.Size())
	}
	if err == nil && st.Size() > seg.end {
		err = f.Truncate(seg.end)
		truncated = err == nil
	}
	limit := l.segSize
	if err == nil {
		var synced bool
		if limit, synced = l.begin(f, seg.end); truncated && !synced {
			err = f.Sync()
		}
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("open batch log: cut the tail of %s: %w", seg.path, err)
	}
	l.w, l.wseg, l.wcap, l.kicked, l.wlimit = f, seg, fileSize(f), seg.end, limit
	l.direct.open(seg.path, seg.end)
	return nil
}

// headSize is how much of a segment begin zero-fills (a variable for
// tests): 10 ms of this machine's disk, and at a 4 KiB barrier's rate a
// few seconds of appends, while a spare takes about one to make.
var headSize int64 = 4 << 20

// begin readies a segment the log starts writing at used with no spare
// made yet: a new log's first segment, or the newest one reopened. An
// append into blocks only preallocated costs its fdatasync two more
// device writes than one into blocks written before (the extent's
// conversion and the inode; see spare), so the segment's next headSize
// bytes are zero-filled and synced, and the segment ends there: by then
// the spare begin starts making is ready. Where that cannot be done (no
// room, a failed write) the rest of the segment is preallocated and it
// ends at segSize. It returns where the segment ends and whether f was
// synced.
func (l *batchLog) begin(f *os.File, used int64) (limit int64, synced bool) {
	if n := min(headSize, l.segSize-used); n > 0 && l.room != nil && l.room(n) {
		err := zeroRange(f, used, n, 0, nil, nil)
		if err == nil {
			l.spare.make(l.segSize)
			return used + n, true
		}
		l.log.Warn("journal: could not zero-fill the head of a segment; preallocating it instead", "segment", f.Name(), "err", err)
	}
	l.preallocate(f, used)
	return l.segSize, false
}

// preallocate gives f the blocks of a whole segment past its first used
// bytes, where the file system can and has room for them above the
// journal's reserve.
func (l *batchLog) preallocate(f *os.File, used int64) {
	if size := max(l.segSize, used); l.room != nil && l.room(size-used) {
		// Not every file system can (EOPNOTSUPP); appends then allocate.
		unix.Fallocate(int(f.Fd()), 0, 0, size)
	}
}

func fileSize(f *os.File) int64 {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}

// slack is what the log holds allocated and unwritten: the newest
// segment's preallocated tail and the spare.
func (l *batchLog) slack() int64 {
	l.mu.RLock()
	n := int64(0)
	if l.wseg != nil {
		n = max(l.wcap-l.wseg.end, 0)
	}
	l.mu.RUnlock()
	return n + l.spare.bytes()
}

// next is the seq the next record must carry (0: any, the log is empty).
func (l *batchLog) next() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.index) == 0 {
		return 0
	}
	return l.first + uint64(len(l.index))
}

// bounds returns the oldest and newest seq held (0, 0 when empty).
func (l *batchLog) bounds() (first, last uint64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.index) == 0 {
		return 0, 0
	}
	return l.first, l.first + uint64(len(l.index)) - 1
}

// rotate starts segment first: the spare if one is ready, else a new,
// preallocated file. The segment it leaves is synced, so that only the
// newest segment of a log can end torn.
func (l *batchLog) rotate(first uint64) error {
	if l.w != nil {
		if err := unix.Fdatasync(int(l.w.Fd())); err != nil {
			return fmt.Errorf("sync segment %s: %w", l.wseg.path, err)
		}
	}
	path := filepath.Join(l.dir, segName(first))
	f, err := l.spare.take(path)
	if err != nil {
		return fmt.Errorf("start segment %d: %w", first, err)
	}
	limit := l.segSize
	if f == nil {
		if f, err = createSegment(path); err != nil {
			return fmt.Errorf("start segment %d: %w", first, err)
		}
		if len(l.segs) == 0 {
			limit, _ = l.begin(f, 0)
		} else {
			l.preallocate(f, 0)
		}
	}
	seg := &segFile{first: first, path: path}
	l.mu.Lock() // readers use w
	l.segs = append(l.segs, seg)
	if l.w != nil {
		l.w.Close()
	}
	l.w, l.wseg, l.wcap, l.kicked, l.dirDirty, l.wlimit = f, seg, fileSize(f), 0, true, limit
	l.mu.Unlock()
	l.direct.open(path, 0)
	l.rotations.Add(1)
	return nil
}

// createSegment creates the segment file path. A file already there is
// the leftover of a rotation to the same seq that failed after naming it
// (the log holds no segment by that name), and is replaced.
func createSegment(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		if err := os.Remove(path); err != nil {
			return nil, err
		}
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	}
	return f, err
}

// sync makes every record appended so far durable.
func (l *batchLog) sync() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.syncLocked()
}

func (l *batchLog) syncLocked() error {
	if l.w == nil {
		return nil
	}
	if err := unix.Fdatasync(int(l.w.Fd())); err != nil {
		return fmt.Errorf("sync segment: %w", err)
	}
	if l.dirDirty {
		if err := syncDir(l.dir); err != nil {
			return fmt.Errorf("sync batch log directory: %w", err)
		}
		l.dirDirty = false
	}
	return nil
}
