package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// metaJournal makes a closed journal of five batches, epoch 7 and the
// given metadata values.
func metaJournal(t *testing.T, meta map[string]string) string {
	t.Helper()
	return damagedJournal(t, func(dir string) {
		st, err := OpenStore(dir, StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range meta {
			if err := st.SetMeta(k, []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// flipInBadger flips the bytes at off and off+1 of every copy of needle in
// Badger's files in dir (its tables and logs; not the batch log), as an
// outside tester did, or of the first copy in each file if first is set;
// it returns how many copies it flipped.
func flipInBadger(t *testing.T, dir string, needle []byte, off int, first bool) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for i := bytes.Index(b, needle); i >= 0; i = next(b, needle, i) {
			b[i+off] ^= 0x5a
			b[i+off+1] ^= 0x5a
			n++
			if first {
				break
			}
		}
		if n > 0 {
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			found += n
		}
	}
	return found
}

func next(b, needle []byte, i int) int {
	j := bytes.Index(b[i+1:], needle)
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

// TestDamagedMetaValueRefused: two bytes flipped inside a metadata value
// in Badger's table fail a read-write open, naming the key and the
// remedy; a read-only open (pbfs journal verify) reports them and goes on.
func TestDamagedMetaValueRefused(t *testing.T) {
	const id = "1bbb3dcc9d0e4c7a8f6e2b5d3c1a0f99"
	dir := metaJournal(t, map[string]string{"volume": id})
	if n := flipInBadger(t, dir, []byte(id), 0, false); n == 0 {
		t.Fatal("the volume id is in none of Badger's files")
	}
	_, err := OpenStore(dir, StoreOptions{})
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("read-write open: %v, want ErrDamaged", err)
	}
	for _, w := range []string{"metadata m/volume is damaged", "written with checksum", "restore the journal directory from a copy"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("read-write open: %q does not say %q", err, w)
		}
	}
	st, err := OpenStore(dir, StoreOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	defer st.Close()
	notes, damaged := st.MetaDamage()
	if !damaged || !strings.Contains(strings.Join(notes, ";"), "m/volume") {
		t.Fatalf("read-only open: damage %v, notes %q; want m/volume named", damaged, notes)
	}
	if _, err := st.Meta("volume"); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Meta(volume) of the damaged value: %v, want ErrDamaged", err)
	}
	if st.Last().Seq != 5 {
		t.Fatalf("read-only open: last seq %d, want 5: the batches are not damaged", st.Last().Seq)
	}
}

// TestDamagedMetaKeyRefused: a metadata key whose bytes were flipped in
// a block of Badger's table (not its index, which Badger checks) is
// refused too: its value's checksum, which covers the key, fails.
func TestDamagedMetaKeyRefused(t *testing.T) {
	dir := metaJournal(t, map[string]string{"volume": "0123456789abcdef0123456789abcdef"})
	if n := flipInBadger(t, dir, []byte("volume"), 2, true); n == 0 {
		t.Fatal("the key m/volume is in none of Badger's files")
	}
	_, err := OpenStore(dir, StoreOptions{})
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("read-write open: %v, want ErrDamaged", err)
	}
	if !strings.Contains(err.Error(), "metadata m/vo") || !strings.Contains(err.Error(), "is damaged") {
		t.Fatalf("read-write open: %q names no damaged key", err)
	}
}

// bareMeta rewrites the metadata of the closed journal in dir as a pbfs
// from before checksums wrote it (format 1): values bare, no format key.
func bareMeta(t *testing.T, dir string) {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithValueThreshold(64 << 10))
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(txn *badger.Txn) error {
		keys, vals, err := metaValues(txn)
		if err != nil {
			return err
		}
		for i, key := range keys {
			v, err := unsealMeta(key, vals[i])
			if err != nil {
				return err
			}
			if err := txn.Set(key, v); err != nil {
				return err
			}
		}
		return txn.Delete(metaVersionKey)
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestFormat1MetaMigrated: a journal whose metadata an older pbfs wrote
// (no checksums) opens read-only as it is, and a read-write open seals
// its values, keeping them.
func TestFormat1MetaMigrated(t *testing.T) {
	const id = "00112233445566778899aabbccddeeff"
	dir := metaJournal(t, map[string]string{"volume": id})
	bareMeta(t, dir)
	check := func(what string, wantNote bool) {
		t.Helper()
		st, err := OpenStore(dir, StoreOptions{ReadOnly: true})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer st.Close()
		v, err := st.Meta("volume")
		if err != nil || string(v) != id || st.Epoch() != 7 || st.Last().Seq != 5 {
			t.Fatalf("%s: volume %q (%v), epoch %d, last %d; want %s, 7, 5", what, v, err, st.Epoch(), st.Last().Seq, id)
		}
		notes, damaged := st.MetaDamage()
		if damaged || (len(notes) > 0) != wantNote {
			t.Fatalf("%s: damaged %v, notes %q; want a note %v", what, damaged, notes, wantNote)
		}
	}
	check("format 1, read-only", true)
	st, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatalf("read-write open of format 1: %v", err)
	}
	if st.metaVer != metaVersion {
		t.Errorf("format %d after a read-write open, want %d", st.metaVer, metaVersion)
	}
	st.Close()
	check("migrated", false)
	// Sealed now: a flipped byte is found.
	flipInBadger(t, dir, []byte(id), 4, false)
	if _, err := OpenStore(dir, StoreOptions{}); !errors.Is(err, ErrDamaged) {
		t.Fatalf("open after damage to a migrated value: %v, want ErrDamaged", err)
	}
}

// TestLostMetaVersionRefused: sealed values without the format key are
// a damaged journal, not an old one whose values would be sealed twice.
func TestLostMetaVersionRefused(t *testing.T) {
	dir := metaJournal(t, map[string]string{"volume": "ffeeddccbbaa99887766554433221100"})
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithValueThreshold(64 << 10))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *badger.Txn) error { return txn.Delete(metaVersionKey) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = OpenStore(dir, StoreOptions{})
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "m/metaversion") {
		t.Fatalf("open: %v, want ErrDamaged naming m/metaversion", err)
	}
}

// TestMetaUintOfAnotherSize: a number that is not 8 bytes is an error,
// not 0.
func TestMetaUintOfAnotherSize(t *testing.T) {
	st, err := OpenStore(t.TempDir(), StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.SetMeta(KeyStalled.Name, binary.BigEndian.AppendUint32(nil, 3)); err != nil {
		t.Fatal(err)
	}
	if v, err := st.MetaUint(KeyStalled.Name); !errors.Is(err, ErrDamaged) {
		t.Fatalf("MetaUint of 4 bytes: %d, %v; want ErrDamaged", v, err)
	}
}
