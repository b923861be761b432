package journal

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOpenAfterAKillDuringBadgersOpen: a kill while Badger opened the
// journal can leave an empty value-log or memtable file behind. The next
// open works the first time, with every batch there.
func TestOpenAfterAKillDuringBadgersOpen(t *testing.T) {
	for _, name := range []string{"000002.vlog", "00002.mem"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			st := reopen(t, nil, dir, StoreOptions{})
			want := appendN(t, st, 3, 100)
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			st, err := OpenStore(dir, StoreOptions{})
			if err != nil {
				t.Fatalf("open with an empty %s: %v", name, err)
			}
			t.Cleanup(func() { st.Close() })
			checkJournal(t, st, want)
			// Badger may make a file of that name anew, sized before use.
			if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && fi.Size() == 0 {
				t.Fatalf("%s is still empty", name)
			}
		})
	}
}
