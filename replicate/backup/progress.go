package backup

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// progressFile holds a backup's durable apply progress, in its journal
// directory.
const progressFile = "apply.progress"

// progress keeps the two numbers recovery needs after a crash or a power
// loss: applied, the last batch whose effects a syncfs of the volume made
// durable, and applying, a batch applied alone that may have touched the
// volume since (0 when none; batches after applied may then have been
// applied in an apply window, applier.go). They change once per window and
// twice per batch applied alone, and each change must be durable before
// the volume moves on, so they live in a file of their own
// written with one pwrite and one fdatasync, not in Badger: a synced Badger
// write msyncs its memtable's mapped log, and that was a fifth of a backup's
// CPU per batch (docs/PERFORMANCE.md).
//
// The file holds two 512-byte slots written in turn, each a record of
// magic, generation, applied, applying and a CRC-32C of the rest; load
// takes the valid record with the higher generation, so a write torn by a
// power loss leaves the previous record in force.
type progress struct {
	mu  sync.Mutex // the apply loop and a resync may both write
	f   *os.File
	gen uint64
}

var progressMagic = [8]byte{'P', 'B', 'F', 'S', 'P', 'R', 'G', '1'}

const (
	progressSlot = 512
	progressRec  = 8 + 8 + 8 + 8 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// openProgress opens dir's progress file, creating it empty.
func openProgress(dir string) (*progress, error) {
	f, err := os.OpenFile(filepath.Join(dir, progressFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open apply progress: %w", err)
	}
	return &progress{f: f}, nil
}

// load returns the newest valid record; ok is false when the file holds
// none (a journal from before the file existed, or a fresh one).
func (p *progress) load() (applied, applying uint64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best uint64
	for slot := int64(0); slot < 2; slot++ {
		var rec [progressRec]byte
		if n, _ := p.f.ReadAt(rec[:], slot*progressSlot); n != progressRec {
			continue
		}
		if [8]byte(rec[:8]) != progressMagic || crc32.Checksum(rec[:32], castagnoli) != binary.LittleEndian.Uint32(rec[32:]) {
			continue
		}
		if gen := binary.LittleEndian.Uint64(rec[8:]); gen > best {
			best, ok = gen, true
			applied, applying = binary.LittleEndian.Uint64(rec[16:]), binary.LittleEndian.Uint64(rec[24:])
		}
	}
	p.gen = best
	return applied, applying, ok
}

// save durably records applied and applying, in the slot the newest
// record is not in.
func (p *progress) save(applied, applying uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	gen := p.gen + 1
	var rec [progressRec]byte
	copy(rec[:8], progressMagic[:])
	binary.LittleEndian.PutUint64(rec[8:], gen)
	binary.LittleEndian.PutUint64(rec[16:], applied)
	binary.LittleEndian.PutUint64(rec[24:], applying)
	binary.LittleEndian.PutUint32(rec[32:], crc32.Checksum(rec[:32], castagnoli))
	if _, err := unix.Pwrite(int(p.f.Fd()), rec[:], int64(gen%2)*progressSlot); err != nil {
		return fmt.Errorf("write apply progress: %w", err)
	}
	if err := unix.Fdatasync(int(p.f.Fd())); err != nil {
		return fmt.Errorf("sync apply progress: %w", err)
	}
	p.gen = gen
	return nil
}

// loadOrMigrate returns the progress, taking it from the journal's
// metadata (where pbfs kept it before this file) when the file has none,
// and writing it to the file then.
func (p *progress) loadOrMigrate(st *journal.Store) (applied, applying uint64, err error) {
	if applied, applying, ok := p.load(); ok {
		return applied, applying, nil
	}
	if applied, err = st.MetaUint(journal.KeyApplied.Name); err != nil {
		return 0, 0, err
	}
	if applying, err = st.MetaUint(journal.KeyApplying.Name); err != nil {
		return 0, 0, err
	}
	return applied, applying, p.save(applied, applying)
}

func (p *progress) close() error { return p.f.Close() }
