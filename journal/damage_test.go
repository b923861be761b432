package journal

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fiveBatches opens a new journal in dir and appends five batches.
func fiveBatches(t *testing.T, dir string) *Store {
	t.Helper()
	st, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, _, err := st.Append([]Op{{Kind: KindMkdir, Path: "d", Mode: 0o755}}, time.Now(), 0, false); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// damagedJournal makes a journal of five batches in a fresh directory,
// closes it, runs damage on it and returns the directory.
func damagedJournal(t *testing.T, damage func(dir string)) string {
	t.Helper()
	dir := t.TempDir()
	st := fiveBatches(t, dir)
	if err := st.SetEpoch(7); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	damage(dir)
	return dir
}

// segments lists the batch log's segment files in dir.
func segments(t *testing.T, dir string) []string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, batchDir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

// openBoth opens dir read-only and read-write and wants ErrDamaged from
// both (and no panic).
func openBoth(t *testing.T, dir string) {
	t.Helper()
	for _, ro := range []bool{true, false} {
		st, err := OpenStore(dir, StoreOptions{ReadOnly: ro})
		if err == nil {
			st.Close()
			t.Fatalf("read-only %v: opened a damaged journal (last seq %d, epoch %d)", ro, st.Last().Seq, st.Epoch())
		}
		if !errors.Is(err, ErrDamaged) {
			t.Fatalf("read-only %v: %v, want ErrDamaged", ro, err)
		}
	}
}

// TestLostMetadataKeepsTheBatches: a journal whose Badger lost its records
// (a truncated MANIFEST) must not be started over, which would delete its
// batches.
func TestLostMetadataKeepsTheBatches(t *testing.T) {
	dir := damagedJournal(t, func(dir string) {
		if err := os.Truncate(filepath.Join(dir, "MANIFEST"), 10); err != nil {
			t.Fatal(err)
		}
	})
	before := segments(t, dir)
	if len(before) == 0 {
		t.Fatal("no segment files")
	}
	openBoth(t, dir)
	if after := segments(t, dir); len(after) != len(before) {
		t.Fatalf("segments %v after the refused opens, %v before", after, before)
	}
	l, err := openBatchLog(filepath.Join(dir, batchDir), true, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if first, last := l.bounds(); first != 1 || last != 5 {
		t.Fatalf("the log holds %d-%d after the refused opens, want 1-5", first, last)
	}
}

// TestMissingBatchLog: a journal whose batch log directory is gone is
// damaged, not empty.
func TestMissingBatchLog(t *testing.T) {
	dir := damagedJournal(t, func(dir string) {
		if err := os.RemoveAll(filepath.Join(dir, batchDir)); err != nil {
			t.Fatal(err)
		}
	})
	openBoth(t, dir)
}

// TestGarbageBadgerTable: a Badger table file of random bytes makes Badger
// panic; the open returns ErrDamaged instead.
func TestGarbageBadgerTable(t *testing.T) {
	dir := damagedJournal(t, func(dir string) {
		ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
		if len(ssts) == 0 {
			t.Skip("Badger wrote no table file")
		}
		junk := make([]byte, 4096)
		for i := range junk {
			junk[i] = byte(i*7 + 3)
		}
		if err := os.WriteFile(ssts[0], junk, 0o600); err != nil {
			t.Fatal(err)
		}
	})
	openBoth(t, dir)
}

// TestNewJournalOpensAgain: the checks above do not refuse a journal that
// has no batches yet, nor a healthy one.
func TestNewJournalOpensAgain(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 2; i++ {
		st, err := OpenStore(dir, StoreOptions{})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		st.Close()
	}
	dir = damagedJournal(t, func(string) {})
	for _, ro := range []bool{true, false} {
		st, err := OpenStore(dir, StoreOptions{ReadOnly: ro})
		if err != nil {
			t.Fatal(err)
		}
		if st.Last().Seq != 5 || st.Epoch() != 7 {
			t.Errorf("read-only %v: last seq %d, epoch %d; want 5, 7", ro, st.Last().Seq, st.Epoch())
		}
		st.Close()
	}
}

// TestTornAppendAndDamageTold: verify must tell a torn last append, which
// a crash leaves, from a damaged batch with intact batches after it.
func TestTornAppendAndDamageTold(t *testing.T) {
	locate := func(dir string, seq uint64) (string, int64, uint32) {
		l, err := openBatchLog(filepath.Join(dir, batchDir), true, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.close()
		loc := l.index[seq-l.first]
		return loc.seg.path, loc.off, loc.n
	}
	check := func(name string, dir string, last uint64, damaged bool, say ...string) {
		t.Helper()
		st, err := OpenStore(dir, StoreOptions{ReadOnly: true})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer st.Close()
		notes, d := st.Damage()
		if st.Last().Seq != last || d != damaged || (len(notes) > 0) != (damaged || last < 5) {
			t.Errorf("%s: last seq %d, damaged %v, notes %q; want last %d, damaged %v", name, st.Last().Seq, d, notes, last, damaged)
		}
		for _, w := range say {
			if !strings.Contains(strings.Join(notes, "; "), w) {
				t.Errorf("%s: notes %q do not say %q", name, notes, w)
			}
		}
	}
	check("healthy", damagedJournal(t, func(string) {}), 5, false)
	check("last batch cut short", damagedJournal(t, func(dir string) {
		path, off, _ := locate(dir, 5)
		if err := os.Truncate(path, off+3); err != nil {
			t.Fatal(err)
		}
	}), 4, false)
	check("a byte of batch 2 flipped", damagedJournal(t, func(dir string) {
		path, off, n := locate(dir, 2)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := []byte{0}
		f.ReadAt(b, off+int64(n)/2)
		b[0] ^= 0xff
		if _, err := f.WriteAt(b, off+int64(n)/2); err != nil {
			t.Fatal(err)
		}
	}), 1, true, "batch 2 at offset", "batch 3 follows it intact")
	check("batch 3's header flipped", damagedJournal(t, func(dir string) {
		path, off, _ := locate(dir, 3)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{0xff}, off-recHdrSize+9); err != nil {
			t.Fatal(err)
		}
	}), 2, true, "batch 4 follows intact")
	check("the last batch's header torn", damagedJournal(t, func(dir string) {
		path, off, _ := locate(dir, 5)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(make([]byte, 8), off-recHdrSize+12); err != nil {
			t.Fatal(err)
		}
	}), 4, false, "a torn append")
}

// TestReadOnlyOpenDeletesNoTable: Badger deletes the tables its MANIFEST
// does not list even when opened read-only; a read-only open of a journal
// whose MANIFEST lost them refuses instead, and the table stays.
func TestReadOnlyOpenDeletesNoTable(t *testing.T) {
	var ssts []string
	dir := damagedJournal(t, func(dir string) {
		ssts, _ = filepath.Glob(filepath.Join(dir, "*.sst"))
		if err := os.Truncate(filepath.Join(dir, "MANIFEST"), 10); err != nil {
			t.Fatal(err)
		}
	})
	if len(ssts) == 0 {
		t.Skip("Badger wrote no table file")
	}
	_, err := OpenStore(dir, StoreOptions{ReadOnly: true})
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("read-only open: %v, want ErrDamaged", err)
	}
	for _, p := range ssts {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("a read-only open removed %s", p)
		}
	}
}

// TestDamagedTailKeptAside: a read-write open cuts the log at a damaged
// batch, as after a torn group append, but keeps what it cut in a file
// beside the log, intact batches after the damage included.
func TestDamagedTailKeptAside(t *testing.T) {
	var segPath string
	var cutFrom int64
	dir := damagedJournal(t, func(dir string) {
		l, err := openBatchLog(filepath.Join(dir, batchDir), true, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		loc := l.index[2-l.first]
		l.close()
		segPath, cutFrom = loc.seg.path, loc.off-recHdrSize
		f, err := os.OpenFile(segPath, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{0xde, 0xad}, loc.off+int64(loc.n)/2); err != nil {
			t.Fatal(err)
		}
	})
	want, err := os.ReadFile(segPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore(dir, StoreOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.Last().Seq != 1 {
		t.Fatalf("last seq %d after the cut, want 1", st.Last().Seq)
	}
	cuts, _ := filepath.Glob(filepath.Join(dir, batchDir, "cut-*"))
	if len(cuts) != 1 {
		t.Fatalf("cut files %v, want one", cuts)
	}
	got, err := os.ReadFile(cuts[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || !bytes.Equal(got, want[cutFrom:cutFrom+int64(len(got))]) || !allZero(want[cutFrom+int64(len(got)):]) {
		t.Fatalf("the cut file holds %d bytes that are not the segment's tail from %d", len(got), cutFrom)
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// TestLostSinceCleanClose: a log that ends before the last seq of the
// journal's last clean close lost batches; a read-only open says so, and
// a reset of the log (a resync) forgets the old mark.
func TestLostSinceCleanClose(t *testing.T) {
	dir := t.TempDir()
	st := fiveBatches(t, dir)
	if _, _, err := st.MarkOpen(); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkClosed(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	l, err := openBatchLog(filepath.Join(dir, batchDir), true, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	loc := l.index[4-l.first]
	l.close()
	if err := os.Truncate(loc.seg.path, loc.off-recHdrSize); err != nil {
		t.Fatal(err)
	}
	st, err = OpenStore(dir, StoreOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	notes, damaged := st.Damage()
	if st.LostFrom() != 4 || !damaged || !strings.Contains(strings.Join(notes, ";"), "batches 4-5 are lost") {
		t.Fatalf("lost from %d, damaged %v, notes %q; want 4, true, batches 4-5 lost", st.LostFrom(), damaged, notes)
	}
	st.Close()
	st, err = OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := st.Get(3)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Reset(enc); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = OpenStore(dir, StoreOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.LostFrom() != 0 {
		t.Fatalf("after a reset the journal still counts batches from %d lost", st.LostFrom())
	}
}
