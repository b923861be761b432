package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Opening and closing a Store: Badger's options, its failures told apart
// (locked, damaged, needing recovery), what the metadata says about the
// batch log, and a Close that cannot hang forever.

// Exists reports whether dir holds a journal (its Badger MANIFEST), for
// commands that must not make one where none was.
func Exists(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, badger.ManifestFilename))
	return err == nil
}

// OpenStore opens (creating if needed) the journal in dir.
func OpenStore(dir string, o StoreOptions) (*Store, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := badger.DefaultOptions(dir).
		WithLogger(badgerLogger{log}).
		WithSyncWrites(!o.LazyAppends).
		WithReadOnly(o.ReadOnly).
		WithNumVersionsToKeep(1).
		WithMemTableSize(16 << 20).
		WithNumMemtables(2).
		WithBlockCacheSize(16 << 20).
		WithValueThreshold(64 << 10).
		WithValueLogFileSize(256 << 20).
		WithNumCompactors(2).
		WithDetectConflicts(false).
		WithMetricsEnabled(false)
	if !o.ReadOnly {
		if err := removeEmptyLogs(dir, log); err != nil {
			return nil, fmt.Errorf("open journal %s: %w", dir, err)
		}
	}
	db, err := openBadger(opts)
	if err != nil {
		if strings.Contains(err.Error(), "Cannot acquire directory lock") || strings.Contains(err.Error(), "resource temporarily unavailable") {
			return nil, fmt.Errorf("open journal %s: %w", dir, ErrLocked)
		}
		if o.ReadOnly && strings.Contains(err.Error(), "truncate required") {
			return nil, fmt.Errorf("open journal %s: %w (%v)", dir, ErrNeedsRecovery, err)
		}
		return nil, openFailed(dir, err)
	}
	s := &Store{db: db, dir: dir, log: log, epoch: 1, changed: make(chan struct{}), lazy: o.LazyAppends,
		ro: o.ReadOnly, space: space{dir: dir, reserve: o.Reserve}}
	if err := s.openMeta(); err != nil {
		db.Close()
		return nil, openFailed(dir, err)
	}
	if s.bl, err = s.openLog(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open journal %s: %w", dir, err)
	}
	s.space.slack = s.bl.slack
	s.bl.damage = func(first, last uint64, path string) { s.integ.noteDamaged(first, last, path) }
	// A read-only store is opened to inspect the journal, damage included.
	if err := s.load(); err != nil && !o.ReadOnly {
		s.bl.close()
		db.Close()
		return nil, fmt.Errorf("open journal %s: %w (pbfs journal verify tells more)", dir, err)
	}
	// Read once now: until the first append, status and the metric said
	// "0 B free", as on a full disk.
	s.space.read()
	return s, nil
}

// openFailed is an open's error; Badger's files damaged, it names the
// remedy.
func openFailed(dir string, err error) error {
	if errors.Is(err, ErrDamaged) {
		return fmt.Errorf("open journal %s: %w; %s", dir, err, MetaRemedy)
	}
	return fmt.Errorf("open journal %s: %w", dir, err)
}

// openBadger is badger.Open after checkTables, with a panic in the
// caller's goroutine (Badger panics on some damaged files) returned as
// ErrDamaged.
func openBadger(opts badger.Options) (db *badger.DB, err error) {
	if !inUse(opts.Dir) {
		// A process that holds the journal may be writing a table right
		// now; Badger refuses the open anyway (ErrLocked).
		if err := checkTables(opts); err != nil {
			return nil, err
		}
	}
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("badger: %v: %w", r, ErrDamaged)
		}
	}()
	return badger.Open(opts)
}

func (s *Store) load() error {
	err := s.db.View(func(txn *badger.Txn) error {
		v, found, err := s.getMeta(txn, epochKey)
		switch {
		case err != nil:
			return fmt.Errorf("load epoch: %w", err)
		case found && len(v) != 8:
			return fmt.Errorf("load epoch: %w", &MetaError{Key: string(epochKey), Reason: fmt.Sprintf("%d bytes, want 8", len(v))})
		case found:
			s.epoch = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	_, last := s.bl.bounds()
	if closed, err := s.MetaUint(KeyClosed.Name); err == nil && closed > last {
		s.lostFrom = last + 1
		note := fmt.Sprintf("the journal held batch %d when last closed cleanly, but its log ends at %d: batches %d-%d are lost", closed, last, last+1, closed)
		s.bl.notes = append(s.bl.notes, note)
		s.bl.damaged = true
		s.log.Error("journal: " + note)
	}
	if last == 0 {
		return nil
	}
	enc, err := s.bl.get(last)
	if err == nil {
		s.last, err = Verify(enc)
	}
	if err != nil {
		return fmt.Errorf("load last batch: %w", err)
	}
	return nil
}

// closeTimeout bounds Close. Badger's Close flushes the memtable to a
// table and retries forever when it cannot write one (a full or read-only
// disk, a journal directory removed under it).
var closeTimeout = 30 * time.Second

// Close closes the store. It first syncs Badger's logs, so that what Close
// could not write into tables is replayed from them at the next open, and
// gives up waiting for Badger after closeTimeout with ErrCloseTimeout.
// Closing again returns the first Close's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Store) close() error {
	var syncErr error
	if !s.ro {
		syncErr = s.flushAll()
	}
	s.bl.close()
	done := make(chan error, 1)
	go func() { done <- s.db.Close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(closeTimeout):
		return fmt.Errorf("close journal %s: %w after %v (sync of its logs: %v); Badger logged why", s.dir, ErrCloseTimeout, closeTimeout, syncErr)
	}
}

// badgerLogger sends Badger's chatter to slog at debug level, warnings and
// errors at their own levels.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}
func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}
func (b badgerLogger) Infof(f string, a ...any) {
	b.l.Debug("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}
func (b badgerLogger) Debugf(f string, a ...any) {
	b.l.Debug("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}
