package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
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
	if s.ro {
		if !moved && old {
			return nil, fmt.Errorf("its batches are still in Badger, as an older pbfs kept them; a read-write open moves them: %w", ErrNeedsRecovery)
		}
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return &batchLog{dir: dir, ro: true, log: s.log}, nil
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
		if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(logKey, []byte{1}) }); err != nil {
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
