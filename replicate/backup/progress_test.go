package backup

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pbfs/pbfs/journal"
)

// TestProgressTornWrite: a save that a power loss tore (its slot garbled)
// leaves the previous record in force, and the next save goes on from it.
func TestProgressTornWrite(t *testing.T) {
	dir := t.TempDir()
	p, err := openProgress(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	if _, _, ok := p.load(); ok {
		t.Fatal("a new progress file has a record")
	}
	for i := uint64(1); i <= 5; i++ {
		if err := p.save(i, i+1); err != nil {
			t.Fatal(err)
		}
	}
	// Generation 5 is in slot 1; tear it.
	if _, err := p.f.WriteAt([]byte("torn"), progressSlot+20); err != nil {
		t.Fatal(err)
	}
	q, err := openProgress(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer q.close()
	applied, applying, ok := q.load()
	if !ok || applied != 4 || applying != 5 {
		t.Fatalf("after a torn save: applied %d applying %d ok %v, want 4 5 true", applied, applying, ok)
	}
	if err := q.save(9, 0); err != nil {
		t.Fatal(err)
	}
	if applied, applying, ok = q.load(); !ok || applied != 9 || applying != 0 {
		t.Fatalf("after the next save: applied %d applying %d, want 9 0", applied, applying)
	}
}

// TestProgressMigrates: a journal from before apply.progress keeps its
// progress in Badger's metadata; the first open takes it from there.
func TestProgressMigrates(t *testing.T) {
	dir := t.TempDir()
	st, err := journal.OpenStore(filepath.Join(dir, "j"), journal.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.SetMetaUints(map[string]uint64{"applied": 41, "applying": 42}); err != nil {
		t.Fatal(err)
	}
	p, err := openProgress(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	applied, applying, err := p.loadOrMigrate(st)
	if err != nil || applied != 41 || applying != 42 {
		t.Fatalf("migrated applied %d applying %d (%v), want 41 42", applied, applying, err)
	}
	if err := st.SetMetaUint("applied", 7); err != nil { // the file rules now
		t.Fatal(err)
	}
	if applied, _, _ := p.loadOrMigrate(st); applied != 41 {
		t.Fatalf("after migration the file says applied %d, want 41", applied)
	}
	if _, err := os.Stat(filepath.Join(dir, progressFile)); err != nil {
		t.Fatal(err)
	}
}
