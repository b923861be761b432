package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Store key layout in Badger (docs/FORMAT.md); the batches themselves are
// in the batch log (seglog.go). Every "m/" value is sealed with a checksum
// (metaseal.go):
//
//	"m/metaversion"                   -> the metadata format (8 bytes): 2
//	"m/epoch"                         -> epoch (8 bytes, big-endian)
//	"m/open"                          -> seq (8 bytes) at which a mount opened the journal;
//	                                     deleted by a clean unmount
//	"m/closed"                        -> last seq (8 bytes) at the last clean unmount;
//	                                     deleted when the log is rewritten (Reset, Put)
//	"b/" + seq (8 bytes, big-endian)  -> encoded batch, in journals made before
//	                                     the batch log (migrate.go)
var (
	batchPrefix = []byte("b/")
	epochKey    = []byte("m/epoch")
	openKey     = []byte("m/open")
	closedKey   = []byte("m/closed")
)

// Store errors callers branch on.
var (
	ErrNotFound = errors.New("batch not found")
	ErrLocked   = errors.New("journal is open in another process")
	// ErrJournalFull: the journal's file system is down to its reserve
	// (space.go). Errors wrapping it also wrap ENOSPC.
	ErrJournalFull = errors.New("journal file system is full")
	// ErrCloseTimeout: Close gave up waiting for Badger (closeTimeout).
	ErrCloseTimeout = errors.New("journal close timed out")
	// ErrNeedsRecovery: a read-only open found the journal as a crash
	// left it (its logs end in a torn write that must be cut off first);
	// only a read-write open can recover it.
	ErrNeedsRecovery = errors.New("journal needs recovery after an unclean stop")
	// ErrDamaged: the journal's files contradict each other (its batch log
	// is gone while its metadata says it has one, or its metadata is gone
	// while the log holds batches) or Badger's own files do not parse. An
	// open refuses it rather than start the journal over; restore the
	// directory from a copy, or resync the node.
	ErrDamaged = errors.New("journal damaged")
)

// StoreOptions configure a Store.
type StoreOptions struct {
	Logger   *slog.Logger
	ReadOnly bool
	// LazyAppends lets Append return before the batch is on disk; Sync
	// makes every batch appended so far durable. Every other write (epoch,
	// markers, metadata, Reset, AppendEncoded) is still synced before it
	// returns. A primary's journal is the queue its backups are fed from:
	// after a crash of the machine it resyncs them from the volume anyway
	// (MarkOpen), so syncing each sealed batch only cost the service's own
	// fsyncs a device flush every seal interval (docs/PERFORMANCE.md).
	LazyAppends bool
	// Reserve is the free space appends leave on the journal's file
	// system; 0 is DefaultReserve of its size.
	Reserve int64
}

// Store keeps sealed batches durably and in seq order: their bodies in
// the batch log, the journal's metadata in Badger.
type Store struct {
	db  *badger.DB
	bl  *batchLog
	dir string
	log *slog.Logger

	lazy   bool
	ro     bool
	syncMu sync.Mutex  // serializes Sync, so none returns before the flush it relies on
	dirty  atomic.Bool // a lazy Append since the last Sync
	syncs  atomic.Uint64

	space space // free space on the journal's file system (space.go)

	closeOnce sync.Once
	closeErr  error

	// metaVer is the metadata format (metaseal.go); metaNotes and
	// metaDamaged what a read-only open found wrong with it.
	metaVer     uint64
	metaNotes   []string
	metaDamaged bool

	integ integrity // what the check of the batch log and reads found (check.go)

	// lostFrom is the first batch the log lost since the last clean close
	// (its last seq then is above the log's end now), 0 if none (load).
	lostFrom uint64

	mu      sync.Mutex
	last    Header // header of the newest batch (zero if none)
	epoch   uint64
	changed chan struct{} // closed and replaced whenever last changes
}

// Changed returns a channel that is closed once the journal grows past
// what Last returned before the call.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// setLast records a new newest batch and wakes Changed's waiters; the
// caller holds mu.
func (s *Store) setLast(h Header) {
	s.last = h
	close(s.changed)
	s.changed = make(chan struct{})
}

func batchKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), batchPrefix...), seq)
}

// Damage returns what opening the batch log found besides whole records
// (a torn append, damage; tail.go, openBatchLog), and whether any of it
// is more than the torn append a crash leaves at the end.
func (s *Store) Damage() (notes []string, damaged bool) {
	return s.bl.notes, s.bl.damaged
}

// Last returns the header of the newest batch; Seq is 0 when empty.
func (s *Store) Last() Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Append numbers ops as the next batch, encodes it and stores it, durably
// unless the store has LazyAppends (then Sync makes it durable). more
// marks a batch whose seal continues in the next one (FlagMore; see
// Split). It returns the stored header. Appends are serialized.
func (s *Store) Append(ops []Op, created time.Time, written uint64, more bool) (Header, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &Batch{Epoch: s.epoch, Seq: s.last.Seq + 1, Created: created, Prev: s.last.Checksum, Written: written, More: more, Ops: ops}
	buf, h, err := Encode(b)
	if err != nil {
		return Header{}, 0, err
	}
	if err := failAppend(); err != nil {
		return Header{}, 0, fmt.Errorf("append batch %d: %w", b.Seq, err)
	}
	if err := s.space.admit(int64(len(buf))); err != nil {
		return Header{}, 0, fmt.Errorf("append batch %d: %w", b.Seq, err)
	}
	if err := s.appendLog(b.Seq, [][]byte{buf}, !s.lazy); err != nil {
		return Header{}, 0, fmt.Errorf("append batch %d: %w", b.Seq, err)
	}
	if s.lazy {
		s.dirty.Store(true)
	}
	s.setLast(h)
	return h, len(buf), nil
}

// appendLog appends bodies to the batch log as seqs first, first+1, ...
// The free space drops by them before the caller stops counting them as to
// come (Writable): by what was written, or, when the append started a
// segment (a preallocation, a zero-filled head, a spare begun), as the file
// system says. The caller holds mu.
func (s *Store) appendLog(first uint64, bodies [][]byte, sync bool) error {
	rot := s.bl.rotations.Load()
	err := s.bl.append(first, bodies, sync)
	if err != nil || s.bl.rotations.Load() != rot {
		s.space.read()
		return err
	}
	n := int64(0)
	for _, b := range bodies {
		n += recHdrSize + int64(len(b))
	}
	s.space.used(n)
	return nil
}

// Sync makes every batch appended so far durable. It costs nothing when
// appends are synced anyway or nothing was appended since the last Sync.
func (s *Store) Sync() error {
	if !s.lazy {
		return nil
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if !s.dirty.Swap(false) {
		return nil
	}
	s.syncs.Add(1)
	if err := s.bl.sync(); err != nil {
		s.dirty.Store(true)
		return fmt.Errorf("sync journal: %w", err)
	}
	return nil
}

// Syncs counts the flushes Sync made.
func (s *Store) Syncs() uint64 { return s.syncs.Load() }

// Get returns the encoded batch seq. The newest batches are served from
// memory and shared by every reader: the caller must not modify the bytes.
func (s *Store) Get(seq uint64) ([]byte, error) { return s.bl.get(seq) }

// Header returns batch seq's header, read alone: its checksum, Prev and
// Created, without reading or checking the body (Get does both).
func (s *Store) Header(seq uint64) (Header, error) {
	b, err := s.bl.head(seq, HeaderSize)
	if err != nil {
		return Header{}, err
	}
	h, err := parseHeader(b)
	if err == nil && h.Seq != seq {
		err = fmt.Errorf("batch %d: its header says seq %d: %w", seq, h.Seq, ErrCorrupt)
	}
	return h, err
}

// Scan calls fn with every stored batch from seq from on, in order, with
// its encoded bytes (valid only during the call). fn returning an error
// stops the scan with that error.
func (s *Store) Scan(from uint64, fn func(seq uint64, enc []byte) error) error {
	return s.bl.scan(from, fn)
}

// Reset replaces every stored batch with anchor, the encoded batch a
// resync left the volume as of (nil: an empty journal), and raises the
// epoch to the anchor's. A resynced backup continues from there.
func (s *Store) Reset(anchor []byte) error {
	var h Header
	if anchor != nil {
		var err error
		if h, err = Verify(anchor); err != nil {
			return fmt.Errorf("reset journal: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.rewrite(func(put func(uint64, []byte) error) error {
		if anchor == nil {
			return nil
		}
		return put(h.Seq, anchor)
	})
	if err != nil {
		return fmt.Errorf("reset journal: %w", err)
	}
	s.setLast(h)
	if h.Epoch > s.epoch {
		s.mu.Unlock()
		err := s.SetEpoch(h.Epoch)
		s.mu.Lock()
		return err
	}
	return nil
}

// Put stores an encoded batch under its seq without checks: next in line,
// or in place of a stored one (which rewrites the whole log); tests use it
// to plant corrupt batches.
func (s *Store) Put(seq uint64, enc []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if next := s.bl.next(); next == 0 || seq == next {
		return s.bl.append(seq, [][]byte{enc}, true)
	}
	var held [][]byte
	var seqs []uint64
	if err := s.bl.scan(0, func(q uint64, b []byte) error {
		if q == seq {
			b = enc
		}
		held, seqs = append(held, append([]byte(nil), b...)), append(seqs, q)
		return nil
	}); err != nil {
		return err
	}
	return s.rewrite(func(put func(uint64, []byte) error) error {
		for i, b := range held {
			if err := put(seqs[i], b); err != nil {
				return err
			}
		}
		return nil
	})
}

// rewrite replaces the batch log with what fill puts; the caller holds mu.
func (s *Store) rewrite(fill func(put func(uint64, []byte) error) error) error {
	// The log is replaced on purpose: what it held at the last clean
	// close says nothing of the new one.
	if err := s.update(func(txn *badger.Txn) error { return txn.Delete(closedKey) }); err != nil {
		return err
	}
	s.lostFrom = 0
	s.integ.forget()
	return s.bl.replace(fill)
}
