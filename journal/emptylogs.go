package journal

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// removeEmptyLogs removes the empty value-log and memtable files a kill
// during Badger's open can leave in dir. Badger sizes such a file right
// after creating it, before it writes anything to it, so an empty one
// never held data; but Badger's next open fails on it ("Create a new
// file"), and only the open after that one works. A backup or a mount
// killed while starting would so refuse to start once.
func removeEmptyLogs(dir string, log *slog.Logger) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil // a new journal
		}
		return fmt.Errorf("list journal: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || !(strings.HasSuffix(name, ".vlog") || strings.HasSuffix(name, ".mem")) {
			continue
		}
		fi, err := e.Info()
		if err != nil || fi.Size() != 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("remove the empty %s a crash left: %w", name, err)
		}
		log.Warn("journal: removed an empty file a crash during an open left", "file", name)
	}
	return nil
}
