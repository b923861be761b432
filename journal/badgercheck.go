package journal

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/badger/v4/y"
	"google.golang.org/protobuf/proto"
)

// checkTables checks the footer of every Badger table file in dir before
// Badger opens them: Badger reads a table's index from offsets in its
// footer without checking them, and a damaged footer panics in one of its
// goroutines, where no recover reaches. A table whose footer points
// outside the file, or whose index fails its checksum, is ErrDamaged.
func checkTables(dir string) error {
	ssts, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		return err
	}
	for _, p := range ssts {
		if err := checkTable(p); err != nil {
			return fmt.Errorf("badger table %s: %w: %w", filepath.Base(p), err, ErrDamaged)
		}
	}
	return nil
}

// checkTable does what Badger's table.initIndex does up to the index's
// checksum, with every offset checked.
func checkTable(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	pos := int64(len(b)) - 4
	if pos < 0 {
		return fmt.Errorf("%d bytes, too short for a footer", len(b))
	}
	sumLen := int64(binary.BigEndian.Uint32(b[pos:]))
	if pos -= sumLen; pos < 4 {
		return fmt.Errorf("checksum length %d past the file's start", sumLen)
	}
	var sum pb.Checksum
	if err := proto.Unmarshal(b[pos:pos+sumLen], &sum); err != nil {
		return fmt.Errorf("index checksum: %v", err)
	}
	pos -= 4
	idxLen := int64(binary.BigEndian.Uint32(b[pos:]))
	if pos -= idxLen; pos < 0 {
		return fmt.Errorf("index length %d past the file's start", idxLen)
	}
	if err := y.VerifyChecksum(b[pos:pos+idxLen], &sum); err != nil {
		return fmt.Errorf("index: %v", err)
	}
	return nil
}
