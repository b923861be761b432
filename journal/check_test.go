package journal

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// flipBody flips 16 bytes in the middle of batch seq's body in the
// closed journal dir, and returns its segment's path.
func flipBody(t *testing.T, dir string, seq uint64) string {
	t.Helper()
	l, err := openBatchLog(filepath.Join(dir, batchDir), true, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	loc := l.index[seq-l.first]
	newest := l.segs[len(l.segs)-1]
	l.close()
	if loc.seg == newest {
		t.Fatalf("batch %d is in the newest segment", seq)
	}
	f, err := os.OpenFile(loc.seg.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 16)
	at := loc.off + int64(loc.n)/2
	f.ReadAt(b, at)
	for i := range b {
		b[i] ^= 0xa5
	}
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	return loc.seg.path
}

// TestCheckFindsOldDamage: damage to a batch in an older segment passes
// the open (only the newest segment's bodies are checked there); the
// check after the start finds it, logs the batch and its segment, counts
// it, and a read of the batch refuses it.
func TestCheckFindsOldDamage(t *testing.T) {
	smallSegments(t, 64<<10)
	dir := t.TempDir()
	st, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := appendN(t, st, 40, 8<<10)
	st.Close()
	seg := flipBody(t, dir, 10)

	var logs bytes.Buffer
	st, err = OpenStore(dir, StoreOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(st.CheckCollectors()...)
	st.CheckBatches(context.Background())
	c := st.BatchCheck()
	if !c.Done || c.DamagedBatches() != 1 || c.Damaged[0].First != 10 || c.Damaged[0].Segment != filepath.Base(seg) {
		t.Fatalf("check: %+v; want batch 10 in %s damaged", c, filepath.Base(seg))
	}
	if c.Checked == 0 || c.Checked >= 40 {
		t.Errorf("check read %d batches; want those of every segment but the newest", c.Checked)
	}
	if !strings.Contains(logs.String(), "first=10 last=10 segment="+seg) {
		t.Errorf("the log does not name batch 10 and its segment:\n%s", logs.String())
	}
	if n := testutil.ToFloat64(st.CheckCollectors()[0]); n != 1 {
		t.Errorf("pbfs_journal_damaged_batches %v, want 1", n)
	}
	_, err = st.Get(10)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), seg) {
		t.Fatalf("Get(10): %v; want ErrCorrupt naming %s", err, seg)
	}
	for _, seq := range []uint64{9, 11} {
		if got, err := st.Get(seq); err != nil || !bytes.Equal(got, want[seq]) {
			t.Fatalf("Get(%d) next to the damage: %v", seq, err)
		}
	}
	// Trimmed, the damaged batch is no longer counted.
	if _, err := st.Trim(20, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if c := st.BatchCheck(); len(c.Damaged) != 0 {
		t.Fatalf("after the trim: %+v", c.Damaged)
	}
}

// TestReadFindsOldDamage: a read that finds damage before the check does
// counts it too.
func TestReadFindsOldDamage(t *testing.T) {
	smallSegments(t, 64<<10)
	dir := t.TempDir()
	st, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, st, 20, 8<<10)
	st.Close()
	flipBody(t, dir, 3)
	st, err = OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Get(3); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get(3): %v, want ErrCorrupt", err)
	}
	if c := st.BatchCheck(); c.DamagedBatches() != 1 || c.Started {
		t.Fatalf("after the read: %+v; want batch 3 damaged, no check begun", c)
	}
}
