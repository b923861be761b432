package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"
)

// A Store keeps its metadata in Badger: the epoch, the open marker and
// named values its users set ("m/" + name; docs/FORMAT.md), each sealed
// with a checksum (metaseal.go). Every write is durable when it returns,
// and in a store with LazyAppends so is every batch appended before it.

// Epoch returns the journal's current epoch.
func (s *Store) Epoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// SetEpoch durably raises the epoch; batches appended later carry it.
func (s *Store) SetEpoch(e uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e < s.epoch {
		return fmt.Errorf("set epoch %d: below current %d", e, s.epoch)
	}
	return s.writeEpoch(e)
}

// ResetEpoch durably sets the epoch, lower than the current one too: the
// repair of an epoch no term can take (replicate's RepairEpoch). It never
// goes below the newest batch's.
func (s *Store) ResetEpoch(e uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e < s.last.Epoch {
		return fmt.Errorf("reset epoch %d: below the newest batch's %d", e, s.last.Epoch)
	}
	return s.writeEpoch(e)
}

// writeEpoch stores e as the epoch; the caller holds s.mu.
func (s *Store) writeEpoch(e uint64) error {
	err := s.update(func(txn *badger.Txn) error {
		return setMeta(txn, epochKey, binary.BigEndian.AppendUint64(nil, e))
	})
	if err != nil {
		return fmt.Errorf("set epoch %d: %w", e, err)
	}
	s.epoch = e
	return nil
}

// LostFrom returns the first batch the log lost since the journal was last
// closed cleanly (MarkClosed recorded a last seq above the log's end now:
// a segment deleted or damaged), or 0.
func (s *Store) LostFrom() uint64 { return s.lostFrom }

// MarkOpen durably records that a mount is using the journal. It returns
// whether an earlier mount never marked it closed (a crash), and the last
// seq at which that mount had opened it.
func (s *Store) MarkOpen() (unclean bool, since uint64, err error) {
	err = s.update(func(txn *badger.Txn) error {
		v, found, err := s.getMeta(txn, openKey)
		if err != nil {
			return err
		}
		if found {
			unclean = true
			if len(v) == 8 {
				since = binary.BigEndian.Uint64(v)
			}
		}
		return setMeta(txn, openKey, binary.BigEndian.AppendUint64(nil, s.Last().Seq))
	})
	if err != nil {
		return false, 0, fmt.Errorf("mark journal open: %w", err)
	}
	return unclean, since, nil
}

// Unclean reports whether a mount marked the journal open and never
// marked it closed (it crashed, or was stopped by force), without
// changing anything (MarkOpen does).
func (s *Store) Unclean() (bool, error) {
	var found bool
	err := s.db.View(func(txn *badger.Txn) (err error) {
		_, found, err = s.getMeta(txn, openKey)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("read the open marker: %w", err)
	}
	return found, nil
}

// MarkClosed records a clean unmount: every change the volume holds is in
// the journal.
func (s *Store) MarkClosed() error {
	err := s.update(func(txn *badger.Txn) error {
		if err := txn.Delete(openKey); err != nil {
			return err
		}
		return setMeta(txn, closedKey, binary.BigEndian.AppendUint64(nil, s.Last().Seq))
	})
	if err != nil {
		return fmt.Errorf("mark journal closed: %w", err)
	}
	return nil
}

// update runs fn in a read-write transaction and returns once its writes,
// and in a store with LazyAppends everything written before them, are
// durable.
func (s *Store) update(fn func(txn *badger.Txn) error) error {
	if err := s.db.Update(fn); err != nil {
		return err
	}
	if s.lazy {
		return s.flushAll()
	}
	return nil
}

// flushAll makes every batch appended and everything Badger wrote durable.
func (s *Store) flushAll() error {
	if err := s.bl.sync(); err != nil {
		return err
	}
	return s.flushBadger()
}

// flushBadger makes everything Badger wrote durable. Badger's own Sync covers
// only the newest value log and the active memtable's log: without
// SyncWrites a value log that filled up, a memtable log set aside for
// flushing, and the files' directory entries are written back whenever
// the kernel likes. So every log file and the directory are synced too.
// (Tables and the manifest Badger syncs itself when it writes them.)
func (s *Store) flushBadger() error {
	if err := s.db.Sync(); err != nil {
		return err
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".vlog") || strings.HasSuffix(name, ".mem") {
			if err := syncFile(filepath.Join(s.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return syncFile(s.dir)
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Meta reads a metadata value ("m/" + name); nil if unset. A value that
// fails its checksum is a *MetaError (ErrDamaged).
func (s *Store) Meta(name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	var out []byte
	err := s.db.View(func(txn *badger.Txn) error {
		var err error
		out, _, err = s.getMeta(txn, []byte(metaPrefix+name))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return out, nil
}

// SetMeta durably writes a metadata value ("m/" + name).
func (s *Store) SetMeta(name string, v []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := s.update(func(txn *badger.Txn) error { return setMeta(txn, []byte(metaPrefix+name), v) }); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// MetaUint reads a metadata value written by SetMetaUint (0 if unset).
func (s *Store) MetaUint(name string) (uint64, error) {
	v, err := s.Meta(name)
	if err != nil || len(v) == 0 {
		return 0, err
	}
	if len(v) != 8 {
		return 0, &MetaError{Key: metaPrefix + name, Reason: fmt.Sprintf("%d bytes, want a number's 8", len(v))}
	}
	return binary.BigEndian.Uint64(v), nil
}

// SetMetaUints writes several metadata values written by SetMetaUint in
// one transaction: one sync for all of them.
func (s *Store) SetMetaUints(kv map[string]uint64) error {
	for name := range kv {
		if err := checkName(name); err != nil {
			return err
		}
	}
	err := s.update(func(txn *badger.Txn) error {
		for name, v := range kv {
			if err := setMeta(txn, []byte(metaPrefix+name), binary.BigEndian.AppendUint64(nil, v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write metadata: %w", err)
	}
	return nil
}

// SetMetaUint durably writes a number.
func (s *Store) SetMetaUint(name string, v uint64) error {
	return s.SetMeta(name, binary.BigEndian.AppendUint64(nil, v))
}
