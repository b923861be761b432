package journal

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// smallSegments makes segments of size bytes for one test.
func smallSegments(t *testing.T, size int64) {
	t.Helper()
	old := segmentSize
	segmentSize = size
	t.Cleanup(func() { segmentSize = old })
}

// appendN appends n batches, each with a write of size random bytes,, and returns their encodings by seq.
func appendN(t *testing.T, st *Store, n, size int) map[uint64][]byte {
	t.Helper()
	out := map[uint64][]byte{}
	for i := 0; i < n; i++ {
		data := make([]byte, size)
		rand.Read(data) // incompressible, so records keep their size
		h, _, err := st.Append([]Op{{Kind: KindWrite, Path: fmt.Sprintf("f%d", i%7), Data: data}}, time.Now(), uint64(size), false)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := st.Get(h.Seq)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Seq] = enc
	}
	return out
}

// checkJournal requires st to hold exactly want, as a verified chain.
func checkJournal(t *testing.T, st *Store, want map[uint64][]byte) {
	t.Helper()
	seen := 0
	bad, err := Walk(st, 0, 0, false, func(c Checked) error {
		if w, ok := want[c.Seq]; ok {
			seen++
			if got, _ := st.Get(c.Seq); !bytes.Equal(got, w) {
				return fmt.Errorf("batch %d differs from what was appended", c.Seq)
			}
		}
		return nil
	})
	if err != nil || bad != 0 || seen != len(want) {
		t.Fatalf("walk: %d bad, %d of %d batches seen, %v", bad, seen, len(want), err)
	}
	if last := st.Last().Seq; want[last] == nil {
		t.Fatalf("last seq %d is not among the appended", last)
	}
}

// reopen closes st (if any) and opens dir again with o; the store is
// closed at the end of the test.
func reopen(t *testing.T, st *Store, dir string, o StoreOptions) *Store {
	t.Helper()
	if st != nil {
		st.Close()
	}
	st, err := OpenStore(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, batchDir, "*"+segSuffix))
	return m
}

// TestBatchLogRotatesAndReopens: batches run over many segments, read back
// the same before and after a reopen, and trimming removes whole segments
// and recycles one as the spare, which the next rotation takes.
func TestBatchLogRotatesAndReopens(t *testing.T) {
	smallSegments(t, 64<<10)
	dir := t.TempDir()
	st := reopen(t, nil, dir, StoreOptions{LazyAppends: true})
	want := appendN(t, st, 200, 3000)
	if n := len(segmentFiles(t, dir)); n < 5 {
		t.Fatalf("%d segments after 600 KB of batches in 64 KiB segments", n)
	}
	checkJournal(t, st, want)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = reopen(t, nil, dir, StoreOptions{LazyAppends: true})
	checkJournal(t, st, want)
	before := len(segmentFiles(t, dir))
	if n, err := st.Trim(150, time.Now()); n != 149 || err != nil {
		t.Fatalf("trim: %d, %v", n, err)
	}
	if after := len(segmentFiles(t, dir)); after >= before {
		t.Fatalf("%d segments after trimming three quarters of %d", after, before)
	}
	if _, err := os.Stat(filepath.Join(dir, batchDir, spareFile)); err != nil {
		t.Fatalf("no spare after a trim freed segments: %v", err)
	}
	for seq := range want {
		if seq < 150 {
			delete(want, seq)
		}
	}
	for seq, enc := range appendN(t, st, 100, 3000) {
		want[seq] = enc
	}
	checkJournal(t, st, want)
	if st.First() != 150 {
		t.Fatalf("first %d after trimming below 150", st.First())
	}
}

// TestBatchLogCutsATornTail: a crash tears the newest segment (a record
// half written, or a hole with newer records behind it). The reopened log
// ends at the last whole record, and records written there later are never
// followed by the old ones behind the hole.
func TestBatchLogCutsATornTail(t *testing.T) {
	for _, tear := range []string{"body", "header", "hole"} {
		t.Run(tear, func(t *testing.T) {
			dir := t.TempDir()
			st := reopen(t, nil, dir, StoreOptions{LazyAppends: true})
			want := appendN(t, st, 10, 500)
			st.Close()
			segs := segmentFiles(t, dir)
			seg := segs[len(segs)-1]
			l, err := openBatchLog(filepath.Join(dir, batchDir), true, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			loc := l.index[8-l.first]
			f, err := os.OpenFile(seg, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			switch tear {
			case "body":
				f.WriteAt([]byte{0xde, 0xad}, loc.off+int64(loc.n)/2)
			case "header":
				f.WriteAt(make([]byte, 4), loc.off-recHdrSize)
			case "hole": // batch 8 never reached the disk; 9 and 10 did
				f.WriteAt(make([]byte, loc.n), loc.off)
			}
			f.Close()
			delete(want, 8)
			delete(want, 9)
			delete(want, 10)
			st = reopen(t, nil, dir, StoreOptions{LazyAppends: true})
			checkJournal(t, st, want)
			if st.Last().Seq != 7 {
				t.Fatalf("last %d after tearing batch 8", st.Last().Seq)
			}
			// Same sizes as before: the new records land where the old
			// ones were, and the old 9 and 10 must not come back.
			for seq, enc := range appendN(t, st, 1, 500) {
				want[seq] = enc
			}
			st = reopen(t, st, dir, StoreOptions{})
			checkJournal(t, st, want)
			if st.Last().Seq != 8 {
				t.Fatalf("last %d, want the rewritten 8 alone", st.Last().Seq)
			}
		})
	}
}

// TestBatchLogSwapRecovers: a crash inside a rewrite (Reset, a migration)
// leaves the old log or the new one, never a mix.
func TestBatchLogSwapRecovers(t *testing.T) {
	dir := t.TempDir()
	st := reopen(t, nil, dir, StoreOptions{})
	want := appendN(t, st, 5, 100)
	st.Close()
	logDir := filepath.Join(dir, batchDir)
	// An unfinished rewrite: its directory is dropped.
	os.Mkdir(logDir+".new", 0o700)
	os.WriteFile(filepath.Join(logDir+".new", segName(1)), []byte("partial"), 0o600)
	st = reopen(t, nil, dir, StoreOptions{})
	checkJournal(t, st, want)
	st.Close()
	// Crashed between the renames: the new log is complete and wins.
	if err := os.Rename(logDir, logDir+".new"); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(logDir+".old", 0o700)
	st = reopen(t, nil, dir, StoreOptions{})
	checkJournal(t, st, want)
	if _, err := os.Stat(logDir + ".old"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the set-aside log is still there: %v", err)
	}
}

// TestOldJournalMoves: a journal an older pbfs wrote keeps its batches in
// Badger; a read-only open refuses it with ErrNeedsRecovery, and a
// read-write open moves the batches into the log and out of Badger.
func TestOldJournalMoves(t *testing.T) {
	dir := t.TempDir()
	src, err := OpenStore(t.TempDir(), StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := appendN(t, src, 20, 2000)
	src.Close()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(txn *badger.Txn) error {
		for seq, enc := range want {
			if err := txn.Set(batchKey(seq), enc); err != nil {
				return err
			}
		}
		return txn.Set(epochKey, binary.BigEndian.AppendUint64(nil, 1))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir, StoreOptions{ReadOnly: true}); !errors.Is(err, ErrNeedsRecovery) {
		t.Fatalf("read-only open of an old journal: %v, want ErrNeedsRecovery", err)
	}
	st := reopen(t, nil, dir, StoreOptions{})
	checkJournal(t, st, want)
	if old, _ := st.hasBadgerBatches(); old {
		t.Fatal("batches are still in Badger after the move")
	}
	st = reopen(t, st, dir, StoreOptions{ReadOnly: true})
	checkJournal(t, st, want)
}

// FuzzScanSegment: any bytes in a segment file scan without a panic, to
// records that lie inside the file and carry consecutive seqs.
func FuzzScanSegment(f *testing.F) {
	var seed []byte
	for i, body := range [][]byte{[]byte("one"), {}, bytes.Repeat([]byte{7}, 100)} {
		seed = append(seed, recordHeader(uint64(5+i), body)...)
		seed = append(seed, body...)
	}
	f.Add(seed, true)
	f.Add(seed[:40], false)
	f.Add(make([]byte, 64), true)
	f.Fuzz(func(t *testing.T, data []byte, bodies bool) {
		path := filepath.Join(t.TempDir(), segName(5))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		seg := &segFile{first: 5, path: path}
		locs, err := scanSegment(seg, bodies)
		if err != nil {
			t.Fatal(err)
		}
		if seg.end > int64(len(data)) || seg.n != len(locs) {
			t.Fatalf("end %d of %d bytes, %d records counted, %d found", seg.end, len(data), seg.n, len(locs))
		}
		for _, loc := range locs {
			if loc.off+int64(loc.n) > int64(len(data)) {
				t.Fatalf("record body at %d+%d past the file's %d bytes", loc.off, loc.n, len(data))
			}
		}
	})
}

// TestBatchLogEmptySegmentRenamed: a crash right after the log moved to a
// new segment leaves it empty, named for a batch that never landed; an
// append under another seq (a Put, a fresh chain) must not go into it.
func TestBatchLogEmptySegmentRenamed(t *testing.T) {
	dir := t.TempDir()
	logDir := filepath.Join(dir, batchDir)
	st := reopen(t, nil, dir, StoreOptions{})
	st.Close()
	os.WriteFile(filepath.Join(logDir, segName(7)), nil, 0o600)
	st = reopen(t, nil, dir, StoreOptions{})
	want := appendN(t, st, 3, 100) // seqs 1..3
	st = reopen(t, st, dir, StoreOptions{})
	checkJournal(t, st, want)
	if _, err := os.Stat(filepath.Join(logDir, segName(7))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the empty segment is still there: %v", err)
	}
}
