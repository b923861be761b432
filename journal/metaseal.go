package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/dgraph-io/badger/v4"
)

// Every metadata value (every "m/" key) is stored sealed: the value, then
// a CRC-32C (Castagnoli) of the key and the value, 4 bytes little-endian
// (docs/FORMAT.md §6.2). Badger checks neither its tables' blocks nor, in
// read-write opens, the records of its logs before it serves them, so bytes
// flipped on disk came back as a wrong volume id or epoch; sealed, they
// fail the open instead. sealMeta and getMeta are the only writers and
// readers of metadata values.
//
// metaVersionKey holds the metadata format: 2, values sealed. Journals made
// before it have none (format 1, values bare); a read-write open seals
// their values (migrateMeta), a read-only one reads them bare.
var metaVersionKey = []byte("m/metaversion")

const (
	metaVersion = 2
	metaPrefix  = "m/"
	sealSize    = 4
)

// MetaRemedy is what to do about a journal whose metadata is damaged.
const MetaRemedy = "restore the journal directory from a copy, or move it aside and start afresh: " +
	"a backup started with --adopt on a new journal is resynced by its primary; a primary's new journal has a new volume id, so its backups need new journals (and --adopt) too"

// MetaError is a metadata value that fails its checks; it wraps ErrDamaged.
type MetaError struct {
	Key    string // the whole key ("m/volume")
	Reason string // what was expected and what was found
}

func (e *MetaError) Error() string { return "metadata " + e.Key + " is damaged: " + e.Reason }
func (e *MetaError) Unwrap() error { return ErrDamaged }

// sealMeta returns v as stored under key.
func sealMeta(key, v []byte) []byte {
	out := make([]byte, 0, len(v)+sealSize)
	out = append(out, v...)
	return binary.LittleEndian.AppendUint32(out, metaSum(key, v))
}

func metaSum(key, v []byte) uint32 {
	return crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, v)
}

// unsealMeta checks a sealed value stored under key and returns the value.
func unsealMeta(key, stored []byte) ([]byte, error) {
	if len(stored) < sealSize {
		return nil, &MetaError{Key: string(key), Reason: fmt.Sprintf("%d bytes stored, fewer than its %d-byte checksum", len(stored), sealSize)}
	}
	v := stored[:len(stored)-sealSize]
	want := binary.LittleEndian.Uint32(stored[len(v):])
	if got := metaSum(key, v); got != want {
		return nil, &MetaError{Key: string(key), Reason: fmt.Sprintf("written with checksum %08x, its %d bytes (%s) now sum to %08x", want, len(v), quoteMeta(v), got)}
	}
	return v, nil
}

// quoteMeta shows a value in an error, quoted, cut after 48 bytes.
func quoteMeta(v []byte) string {
	const most = 48
	if len(v) > most {
		return fmt.Sprintf("%q...", v[:most])
	}
	return fmt.Sprintf("%q", v)
}

// getMeta reads key in txn: its value checked (bare in a format 1 journal
// opened read-only), and whether it is set.
func (s *Store) getMeta(txn *badger.Txn, key []byte) ([]byte, bool, error) {
	it, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	stored, err := it.ValueCopy(nil)
	if err != nil {
		return nil, false, err
	}
	if s.metaVer < metaVersion {
		return stored, true, nil
	}
	v, err := unsealMeta(key, stored)
	return v, err == nil, err
}

// setMeta writes v under key in txn, sealed.
func setMeta(txn *badger.Txn, key, v []byte) error {
	return txn.Set(key, sealMeta(key, v))
}

// openMeta reads the metadata format, seals a format 1 journal's values
// (read-write), then checks every key and Badger's tables. A read-write
// open fails on what it finds; a read-only one (pbfs journal verify) keeps
// it for MetaDamage.
func (s *Store) openMeta() error {
	ver, err := s.readMetaVersion()
	if err != nil {
		// Only sealed journals have the key: check the rest as sealed.
		ver = metaVersion
		if err = s.metaFailed(err); err != nil {
			return err
		}
	}
	if ver > metaVersion {
		return fmt.Errorf("metadata format %d: this pbfs reads up to %d; run a newer pbfs: %w", ver, metaVersion, ErrVersion)
	}
	s.metaVer = ver
	if ver < metaVersion {
		if s.ro {
			s.metaNotes = append(s.metaNotes, "metadata format 1: its values carry no checksums (written by an older pbfs); the next mount or backup adds them")
		} else if err := s.migrateMeta(); err != nil {
			return s.metaFailed(err)
		}
	}
	if err := s.checkMeta(); err != nil {
		return s.metaFailed(err)
	}
	if err := s.verifyTables(); err != nil {
		return s.metaFailed(err)
	}
	return nil
}

// metaFailed returns err for a read-write open; a read-only one notes it
// and goes on, so that verify can say what else it finds.
func (s *Store) metaFailed(err error) error {
	if !s.ro || !errors.Is(err, ErrDamaged) {
		return err
	}
	s.metaNotes = append(s.metaNotes, err.Error())
	s.metaDamaged = true
	return nil
}

// checkMeta checks every key: each metadata value against its seal, and
// that no key lies outside the two prefixes the journal writes (a key
// whose bytes were flipped).
func (s *Store) checkMeta() error {
	var bad []string
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			key := it.Item().KeyCopy(nil)
			switch {
			case strings.HasPrefix(string(key), string(batchPrefix)):
				// An older journal's batches (migrate.go), checked as batches.
			case !strings.HasPrefix(string(key), metaPrefix):
				bad = append(bad, (&MetaError{Key: fmt.Sprintf("%q", key), Reason: "no key the journal writes (a key's bytes flipped?)"}).Error())
			case s.metaVer >= metaVersion:
				stored, err := it.Item().ValueCopy(nil)
				if err != nil {
					return fmt.Errorf("read %s: %w", key, err)
				}
				if _, err := unsealMeta(key, stored); err != nil {
					bad = append(bad, err.Error())
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check metadata: %w", err)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: %w", strings.Join(bad, "; "), ErrDamaged)
	}
	return nil
}

// verifyTables checks the checksum of every block of Badger's tables,
// which Badger does not when it reads them: damage to a key, or to what
// Badger keeps beside a value, would otherwise make a key vanish.
func (s *Store) verifyTables() (err error) {
	defer func() {
		// Badger panics on some damaged blocks (a nil block in its error path).
		if r := recover(); r != nil {
			err = fmt.Errorf("badger tables: %v: %w", r, ErrDamaged)
		}
	}()
	if err := s.db.VerifyChecksum(); err != nil {
		return fmt.Errorf("badger tables: %v: %w", err, ErrDamaged)
	}
	return nil
}

// readMetaVersion returns the journal's metadata format: 1 when it has
// no metaVersionKey.
func (s *Store) readMetaVersion() (uint64, error) {
	ver := uint64(1)
	err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(metaVersionKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		stored, err := it.ValueCopy(nil)
		if err != nil {
			return err
		}
		v, err := unsealMeta(metaVersionKey, stored)
		if err != nil {
			return err
		}
		if len(v) != 8 {
			return &MetaError{Key: string(metaVersionKey), Reason: fmt.Sprintf("%d bytes, want 8", len(v))}
		}
		ver = binary.BigEndian.Uint64(v)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("read the metadata format: %w", err)
	}
	return ver, nil
}

// migrateMeta seals the values of a format 1 journal and records format
// 2, in one transaction. A journal that has no format key but whose values
// are sealed lost the key: that is damage, not an old journal.
func (s *Store) migrateMeta() error {
	n := 0
	err := s.db.Update(func(txn *badger.Txn) error {
		keys, vals, err := metaValues(txn)
		if err != nil {
			return err
		}
		for i, key := range keys {
			if _, err := unsealMeta(key, vals[i]); err == nil {
				return &MetaError{Key: string(metaVersionKey), Reason: fmt.Sprintf("missing, but %s carries a checksum, as only format 2 values do", key)}
			}
		}
		epoch := false
		for i := range keys {
			if err := setMeta(txn, keys[i], vals[i]); err != nil {
				return err
			}
			epoch = epoch || bytes.Equal(keys[i], epochKey)
		}
		n = len(keys)
		if !epoch {
			// A pbfs from before format 2 refuses a journal whose m/epoch
			// is not 8 bytes, where it would misread every other value.
			if err := setMeta(txn, epochKey, binary.BigEndian.AppendUint64(nil, 1)); err != nil {
				return err
			}
		}
		return setMeta(txn, metaVersionKey, binary.BigEndian.AppendUint64(nil, metaVersion))
	})
	if err != nil {
		return fmt.Errorf("add checksums to the metadata: %w", err)
	}
	if err := s.flushBadger(); err != nil {
		return fmt.Errorf("add checksums to the metadata: %w", err)
	}
	if n > 0 {
		s.log.Info("journal: the metadata values now carry checksums (metadata format 2)", "values", n)
	}
	s.metaVer = metaVersion
	return nil
}

// metaValues returns every metadata key and its stored value.
func metaValues(txn *badger.Txn) (keys, vals [][]byte, err error) {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(metaPrefix)})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return nil, nil, err
		}
		keys, vals = append(keys, it.Item().KeyCopy(nil)), append(vals, v)
	}
	return keys, vals, nil
}

// MetaDamage returns what a read-only open found wrong with the journal's
// metadata (a read-write open fails on it instead), and whether any of it
// is damage rather than a note.
func (s *Store) MetaDamage() (notes []string, damaged bool) {
	return s.metaNotes, s.metaDamaged
}
