package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/dgraph-io/badger/v4"
)

// batchDir is the batch log's directory inside the journal directory.
const batchDir = "batches"

// Journals made before the batch log kept each batch in Badger under
// "b/" + seq. logKey marks a journal whose batches live in the log: set
// on a new journal, and on an old one once its batches were copied into
// the log and synced, before they are dropped from Badger. A crash
// anywhere in the move repeats it at the next open.
var logKey = []byte("m/batchlog")

// openLog opens the store's batch log, moving the batches of an older
// journal out of Badger first. A read-only open cannot move them and
// returns ErrNeedsRecovery.
func (s *Store) openLog() (*batchLog, error) {
	dir := filepath.Join(s.dir, batchDir)
	moved, err := s.hasKey(logKey)
	if err != nil {
		return nil, err
	}
	old, err := s.hasBadgerBatches()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) && moved && !s.ro {
		// A crash inside a rewrite leaves the log under another name.
		if err := recoverSwap(dir); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(dir + ".old"); err == nil && moved && s.ro {
			return nil, fmt.Errorf("a rewrite of its batch log was cut short; a read-write open finishes it: %w", ErrNeedsRecovery)
		}
		if moved {
			return nil, fmt.Errorf("open batch log: %s is missing, though the journal's metadata says its batches are there: %w", dir, ErrDamaged)
		}
		if s.ro {
			if old {
				return nil, fmt.Errorf("its batches are still in Badger, as an older pbfs kept them; a read-write open moves them: %w", ErrNeedsRecovery)
			}
			return &batchLog{dir: dir, ro: true, log: s.log, spare: newSpare(dir, s.log, nil)}, nil
		}
	} else if !moved && !old {
		// Every journal that has a batch log has logKey. A log with batches
		// but no logKey means Badger lost its records (its MANIFEST or
		// tables damaged or replaced): starting the journal over here
		// would delete every batch, and the epoch with them.
		if first, last, err := logBounds(dir, s.log); err != nil {
			return nil, err
		} else if last > 0 {
			return nil, fmt.Errorf("open batch log: it holds batches %d-%d, but the journal's metadata (Badger) has no record of them: %w", first, last, ErrDamaged)
		}
	}
	if s.ro {
		if !moved && old {
			return nil, fmt.Errorf("its batches are still in Badger, as an older pbfs kept them; a read-write open moves them: %w", ErrNeedsRecovery)
		}
		return openBatchLog(dir, true, s.log, nil)
	}
	if err := recoverSwap(dir); err != nil {
		return nil, err
	}
	if !moved {
		if old {
			s.log.Info("journal: moving batches out of Badger into the batch log", "dir", dir)
		}
		err := rewriteLog(dir, s.log, func(put func(uint64, []byte) error) error {
			return s.badgerBatches(put)
		})
		if err != nil {
			return nil, err
		}
		if err := s.db.Update(func(txn *badger.Txn) error { return setMeta(txn, logKey, []byte{1}) }); err != nil {
			return nil, fmt.Errorf("open batch log: %w", err)
		}
		if err := s.flushBadger(); err != nil {
			return nil, fmt.Errorf("open batch log: %w", err)
		}
	}
	if old {
		if err := s.db.DropPrefix(batchPrefix); err != nil {
			return nil, fmt.Errorf("drop batches moved out of Badger: %w", err)
		}
	}
	return openBatchLog(dir, false, s.log, s.space.room)
}

// logBounds returns the first and last seq the batch log in dir holds,
// reading it without changing it.
func logBounds(dir string, log *slog.Logger) (first, last uint64, err error) {
	l, err := openBatchLog(dir, true, log, nil)
	if err != nil {
		return 0, 0, err
	}
	defer l.close()
	first, last = l.bounds()
	return first, last, nil
}

func (s *Store) hasKey(key []byte) (bool, error) {
	err := s.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(key)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", key, err)
	}
	return true, nil
}

func (s *Store) hasBadgerBatches() (bool, error) {
	found := false
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: batchPrefix})
		defer it.Close()
		it.Rewind()
		found = it.Valid()
		return nil
	})
	return found, err
}

// badgerBatches calls fn with every batch an older journal kept in Badger,
// in seq order.
func (s *Store) badgerBatches(fn func(seq uint64, enc []byte) error) error {
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: batchPrefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != len(batchPrefix)+8 {
				return fmt.Errorf("move batches: key %q: %w", k, ErrCorrupt)
			}
			seq := binary.BigEndian.Uint64(k[len(batchPrefix):])
			if err := it.Item().Value(func(v []byte) error { return fn(seq, v) }); err != nil {
				return err
			}
		}
		return nil
	})
}
