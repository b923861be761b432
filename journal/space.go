package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// Badger writes its logs and tables through memory maps of sparse files:
// when the file system is full, the write that needs a new block is a
// SIGBUS, and the process dies (dgraph-io/badger#1682, #1801). So the
// store never lets the journal's file system run out: an append that
// would leave less than the reserve free is refused with ErrJournalFull
// (which is also ENOSPC), and Writable tells the capture layer to refuse
// the service's writes, which the journal could not take, for the same
// reason. The reserve covers what Badger writes on its own: two memtables
// flushed to tables, compactions, value-log rewrites.

// Reserve bounds (see DefaultReserve).
const (
	maxDefaultReserve = 256 << 20
	minDefaultReserve = 48 << 20 // above two 16 MiB memtables flushed at once
)

// spaceCheckEvery is how stale Writable's answer may be.
const spaceCheckEvery = 100 * time.Millisecond

// DefaultReserve is the reserve for a journal file system of size bytes:
// a quarter of it, between 48 and 256 MiB.
func DefaultReserve(size int64) int64 {
	return min(max(size/4, minDefaultReserve), maxDefaultReserve)
}

// space tracks the free space of the journal's file system.
type space struct {
	dir     string
	reserve int64 // 0: DefaultReserve of the file system's size
	free    atomic.Int64
	// reserveNow is the reserve in bytes as of the last read.
	reserveNow atomic.Int64
	refused    atomic.Bool // the last append was refused

	checked  atomic.Int64 // unix ns of the last statfs
	refusals atomic.Uint64

	// slack is the space the batch log holds allocated and not yet
	// written (its newest segment's preallocated tail, its spare): the
	// journal's appends go there before they take free space. nil: none.
	slack func() int64
}

// read reads the journal's free space (the file system's and the batch
// log's slack) and the reserve; ok is false when statfs fails.
func (sp *space) read() (free, reserve int64, ok bool) {
	free, reserve, ok = sp.readFS()
	if !ok {
		return 0, 0, false
	}
	if sp.slack != nil {
		free += sp.slack()
	}
	sp.free.Store(free)
	sp.reserveNow.Store(reserve)
	sp.checked.Store(time.Now().UnixNano())
	return free, reserve, ok
}

// readFS returns the file system's own free space and the reserve.
func (sp *space) readFS() (free, reserve int64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(sp.dir, &st); err != nil {
		return 0, 0, false
	}
	free, size := int64(st.Bavail)*st.Bsize, int64(st.Blocks)*st.Bsize
	reserve = sp.reserve
	if reserve == 0 {
		reserve = DefaultReserve(size)
	}
	return free, reserve, true
}

// room reports whether allocating n more bytes of the file system (a
// segment's preallocation, a spare) leaves the reserve free.
func (sp *space) room(n int64) bool {
	free, reserve, ok := sp.readFS()
	return ok && free-n >= reserve
}

// segmentSizeFor is the batch log's segment size on a file system of
// size bytes: a 32nd of it, between 1 MiB and segmentSize, so that the
// preallocated segment and the spare never take much of a small disk.
func segmentSizeFor(size int64) int64 {
	return min(max(size/32&^(1<<20-1), 1<<20), segmentSize)
}

// fsSize is the size of the file system dir is on (0 if unknown).
func fsSize(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Blocks) * st.Bsize
}

// admit reports whether need more bytes still leave the reserve free, as
// the file system says now: something else may have taken the space since
// the last read. A statfs that fails says nothing, and the write goes
// ahead (and fails on its own if it must).
func (sp *space) admit(need int64) error {
	free, reserve, ok := sp.read()
	if !ok || free-need >= reserve {
		sp.refused.Store(false)
		return nil
	}
	sp.refused.Store(true)
	sp.refusals.Add(1)
	return fmt.Errorf("%w: %d bytes free on %s, %d to write and %d to keep in reserve: %w",
		ErrJournalFull, free, sp.dir, need, reserve, syscall.ENOSPC)
}

// used counts n bytes appended since the last read: they came out of the
// batch log's slack or the file system's free space.
func (sp *space) used(n int64) { sp.free.Add(-n) }

// writable reports ErrJournalFull while the file system, less the
// unjournaled bytes still to come, is below the reserve (free space is
// read again at most every spaceCheckEvery), or while the last append was
// refused: then every write taken now would only wait behind it.
func (sp *space) writable(unjournaled int64) error {
	if time.Now().UnixNano()-sp.checked.Load() > int64(spaceCheckEvery) {
		sp.read()
	}
	if sp.refused.Load() {
		return fmt.Errorf("%w: the last append did not fit on %s: %w", ErrJournalFull, sp.dir, syscall.ENOSPC)
	}
	free := sp.free.Load()
	if free-toCome(unjournaled) < sp.reserveNow.Load() {
		return fmt.Errorf("%w: %d bytes free on %s, %d captured and not yet journaled: %w",
			ErrJournalFull, free, sp.dir, unjournaled, syscall.ENOSPC)
	}
	return nil
}

// toCome is what unjournaled payload bytes may take in the journal: the
// encoding adds headers and paths to the payload, and compression can add
// a little to incompressible data; writes are refused with this margin so
// that the batches they are in are never refused.
func toCome(unjournaled int64) int64 {
	if unjournaled == 0 {
		return 0
	}
	return unjournaled + unjournaled/16 + 1<<20
}

// Writable reports ErrJournalFull (also ENOSPC) while the journal's file
// system could not take unjournaled more bytes and keep its reserve free,
// or the last append was refused for want of space; it is cheap enough to
// ask before every write.
func (s *Store) Writable(unjournaled int64) error { return s.space.writable(unjournaled) }

// FreeBytes is the room for the journal when last read: its file system's
// free space and what the batch log holds preallocated and unwritten.
func (s *Store) FreeBytes() int64 { return s.space.free.Load() }

// Refusing reports whether the journal refused its last append for want
// of space (ErrJournalFull): it takes nothing more until there is room.
func (s *Store) Refusing() bool { return s.space.refused.Load() }

// Refusals counts appends refused for want of space.
func (s *Store) Refusals() uint64 { return s.space.refusals.Load() }

// SpaceCollectors are the store's free-space metrics, for the caller's
// registry.
func (s *Store) SpaceCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pbfs_journal_free_bytes", Help: "Room for the journal when last read: free space on its file system plus what the batch log holds preallocated and unwritten.",
		}, func() float64 { return float64(s.FreeBytes()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "pbfs_journal_appends_refused_total", Help: "Appends refused because they would leave less than the reserve free on the journal's file system.",
		}, func() float64 { return float64(s.Refusals()) }),
	}
}

// ErrReserveTooLarge: the journal's file system is no larger than the
// space it must keep free, so no append could ever be admitted.
var ErrReserveTooLarge = errors.New("the journal's file system is too small for its reserve")

// ErrBadReserve: a negative reserve was asked for.
var ErrBadReserve = errors.New("bad journal reserve")

// CheckReserve refuses a journal directory (or, if it does not exist yet,
// the directory it would be made in) whose file system leaves no room for
// a journal above the reserve (0: DefaultReserve), before anything is
// made there.
func CheckReserve(dir string, reserve int64) error {
	if reserve < 0 {
		return fmt.Errorf("%w: %d bytes: want 0 (a quarter of the file system, between %d and %d MiB) or more", ErrBadReserve, reserve, minDefaultReserve>>20, maxDefaultReserve>>20)
	}
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		var st unix.Statfs_t
		err := unix.Statfs(d, &st)
		if errors.Is(err, unix.ENOENT) && d != filepath.Dir(d) {
			continue
		}
		if err != nil {
			return nil // the open that follows reports it
		}
		size := int64(st.Blocks) * st.Bsize
		if reserve == 0 {
			reserve = DefaultReserve(size)
		}
		if reserve >= size-minJournalRoom {
			return fmt.Errorf("%w: %s is on a file system of %d MiB and must keep %d MiB free (--journal-reserve): give the journal a larger file system, or a smaller reserve",
				ErrReserveTooLarge, dir, size>>20, reserve>>20)
		}
		return nil
	}
}

// minJournalRoom is the least room above the reserve a journal needs:
// Badger's first memtable and value log.
const minJournalRoom = 16 << 20

// Tight reports whether the journal is short of space: its last append was
// refused, or the room left above the reserve (read now) is below a
// quarter of the reserve. Retention then trims what every backup holds
// without waiting for its window.
func (s *Store) Tight() bool {
	free, reserve, ok := s.space.read()
	return s.space.refused.Load() || ok && free-reserve < max(reserve/4, 8<<20)
}

// ReserveBytes is the reserve in bytes as of the last free-space read.
func (s *Store) ReserveBytes() int64 { return s.space.reserveNow.Load() }

// DiskBytes is what the journal's files take on disk.
func (s *Store) DiskBytes() int64 {
	var n int64
	filepath.WalkDir(s.dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512 // sparse value logs count as allocated
				}
			}
		}
		return nil
	})
	return n
}
