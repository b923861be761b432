package journal

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/badger/v4/y"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// checkTables checks the footer of every Badger table file in dir before
// Badger opens them: Badger reads a table's index from offsets in its
// footer without checking them, and a damaged footer panics in one of its
// goroutines, where no recover reaches. A table whose footer points
// outside the file, or whose index fails its checksum, is ErrDamaged.
//
// Badger also deletes every table its MANIFEST does not list, even when
// opened read-only. A read-write open may: a crash inside a compaction or
// a flush leaves such tables, and Badger's cleanup is what recovers from
// it. A read-only open (pbfs journal ...) must change nothing, so there a
// table the MANIFEST does not list (a damaged MANIFEST, say) is ErrDamaged.
func checkTables(opts badger.Options) error {
	dir := opts.Dir
	ssts, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil || len(ssts) == 0 {
		return err
	}
	var listed map[uint64]bool
	if opts.ReadOnly {
		if listed, err = manifestTables(opts); err != nil {
			return fmt.Errorf("badger MANIFEST: %w: %w", err, ErrDamaged)
		}
	}
	for _, p := range ssts {
		if id, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), ".sst"), 10, 64); err == nil && listed != nil && !listed[id] {
			return fmt.Errorf("badger table %s is not in the MANIFEST (Badger would delete it; a read-write open, by pbfs mount or backup, lets it): %w", filepath.Base(p), ErrDamaged)
		}
		if err := checkTable(p); err != nil {
			return fmt.Errorf("badger table %s: %w: %w", filepath.Base(p), err, ErrDamaged)
		}
	}
	return nil
}

// inUse reports whether another process holds dir as Badger does, with
// an exclusive flock on the directory.
func inUse(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) != nil
}

// manifestTables returns the ids of the tables Badger's MANIFEST lists.
func manifestTables(opts badger.Options) (map[uint64]bool, error) {
	f, err := os.Open(filepath.Join(opts.Dir, badger.ManifestFilename))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, _, err := badger.ReplayManifestFile(f, opts.ExternalMagicVersion, opts)
	if err != nil {
		return nil, err
	}
	ids := map[uint64]bool{}
	for id := range m.Tables {
		ids[id] = true
	}
	return ids, nil
}

// checkTable does what Badger's table.initIndex does up to the index's
// checksum, with every offset checked.
// Only the footer and the index are read, not the table's blocks.
func checkTable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	read := func(off, n int64) ([]byte, error) {
		b := make([]byte, n)
		_, err := f.ReadAt(b, off)
		return b, err
	}
	pos := st.Size() - 4
	if pos < 0 {
		return fmt.Errorf("%d bytes, too short for a footer", st.Size())
	}
	b, err := read(pos, 4)
	if err != nil {
		return err
	}
	sumLen := int64(binary.BigEndian.Uint32(b))
	if pos -= sumLen; pos < 4 {
		return fmt.Errorf("checksum length %d past the file's start", sumLen)
	}
	if b, err = read(pos-4, sumLen+4); err != nil {
		return err
	}
	var sum pb.Checksum
	if err := proto.Unmarshal(b[4:], &sum); err != nil {
		return fmt.Errorf("index checksum: %v", err)
	}
	idxLen := int64(binary.BigEndian.Uint32(b[:4]))
	if pos -= 4 + idxLen; pos < 0 {
		return fmt.Errorf("index length %d past the file's start", idxLen)
	}
	if b, err = read(pos, idxLen); err != nil {
		return err
	}
	if err := y.VerifyChecksum(b, &sum); err != nil {
		return fmt.Errorf("index: %v", err)
	}
	return nil
}
