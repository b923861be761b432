package journal

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestTrimKeepsTheSafeSeqAndTheNewest: the batch a backup holds last is
// what it proves its history with, so trimming stops below it.
func TestTrimKeepsTheSafeSeqAndTheNewest(t *testing.T) {
	st, err := OpenStore(t.TempDir(), StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	old := time.Now().Add(-time.Hour)
	for i := 0; i < 10; i++ {
		if _, _, err := st.Append([]Op{{Kind: KindMkdir, Path: "d", Mode: 0o755}}, old, 0, false); err != nil {
			t.Fatal(err)
		}
	}
	n, err := st.Trim(5, time.Now())
	if err != nil || n != 4 || st.First() != 5 {
		t.Fatalf("Trim(5): %d trimmed, first %d, %v", n, st.First(), err)
	}
	if n, _ := st.Trim(100, time.Now()); n != 5 || st.First() != 10 {
		t.Fatalf("Trim(100): %d trimmed, first %d; the newest must stay", n, st.First())
	}
	if _, err := st.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
}

// TestLazyAppendsSyncOnDemand: a store with LazyAppends flushes only when
// asked and only when something was appended since, and a Sync that
// arrives while another flushes waits for a flush covering its appends.
func TestLazyAppendsSyncOnDemand(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, StoreOptions{LazyAppends: true})
	if err != nil {
		t.Fatal(err)
	}
	op := []Op{{Kind: KindMkdir, Path: "d", Mode: 0o755}}
	for i := 0; i < 3; i++ {
		if _, _, err := s.Append(op, time.Now(), 0, false); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Syncs(); n != 0 {
		t.Fatalf("%d flushes after lazy appends, want 0", n)
	}
	for i := 0; i < 2; i++ {
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Syncs(); n != 1 {
		t.Fatalf("%d flushes after two Syncs of one set of appends, want 1", n)
	}
	if err := s.SetEpoch(2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Append(op, time.Now(), 0, false); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	for i := 0; i < 4; i++ {
		go func() { done <- s.Sync() }()
	}
	for i := 0; i < 4; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Syncs(); n != 2 {
		t.Fatalf("%d flushes after concurrent Syncs of one append, want 2", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if last, epoch := s.Last(), s.Epoch(); last.Seq != 4 || epoch != 2 || last.Epoch != 2 {
		t.Fatalf("reopened: last seq %d (epoch %d), store epoch %d; want 4, 2, 2", last.Seq, last.Epoch, epoch)
	}
}

// TestRetentionTrimsEarlyWhenTight: a journal short of space trims what
// every backup holds at once, not after its retention window; with room
// it waits for the window.
func TestRetentionTrimsEarlyWhenTight(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, _, err := st.Append([]Op{{Kind: KindMkdir, Path: "d", Mode: 0o755}}, time.Now(), 0, false); err != nil {
			t.Fatal(err)
		}
	}
	r := &Retention{Store: st, Window: time.Hour, SafeSeq: func() uint64 { return 8 }, Logger: slog.New(slog.DiscardHandler)}
	r.pass(time.Now())
	if st.First() != 1 {
		t.Fatalf("with room, a pass inside the window trimmed to %d", st.First())
	}
	st.Close()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	st, err = OpenStore(dir, StoreOptions{Reserve: int64(fs.Bavail)*fs.Bsize + 256<<20}) // past the log's preallocated slack too
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Tight() {
		t.Fatal("a journal whose reserve is all the free space is not Tight")
	}
	if _, _, err := st.Append([]Op{{Kind: KindMkdir, Path: "d", Mode: 0o755}}, time.Now(), 0, false); !errors.Is(err, ErrJournalFull) || !st.Refusing() {
		t.Fatalf("append into the reserve: %v, refusing %v; want ErrJournalFull and Refusing", err, st.Refusing())
	}
	r.Store = st
	r.pass(time.Now())
	if st.First() != 8 || st.Last().Seq != 10 {
		t.Fatalf("tight: the journal holds %d-%d, want 8-10 (what every backup holds trimmed, the safe seq kept)", st.First(), st.Last().Seq)
	}
}

// TestHeaderReadsABatchHeaderAlone: Header gives what decoding the whole
// batch does, for batches in the cache of recent appends and read back
// from the disk alike, and ErrNotFound outside the journal; Unclean says
// whether a mount left the journal marked open.
func TestHeaderReadsABatchHeaderAlone(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, _, err := st.Append([]Op{{Kind: KindWrite, Path: "f", Data: make([]byte, 1000*i)}}, time.Unix(int64(i), 0), 0, false); err != nil {
			t.Fatal(err)
		}
	}
	if h, err := st.Header(5); err != nil || h != st.Last() {
		t.Fatalf("Header of the newest append: %+v %v; want %+v", h, err, st.Last())
	}
	if _, _, err := st.MarkOpen(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err = OpenStore(dir, StoreOptions{}); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if unclean, err := st.Unclean(); err != nil || !unclean {
		t.Fatalf("Unclean after MarkOpen: %v %v", unclean, err)
	}
	for seq := uint64(1); seq <= 5; seq++ {
		enc, err := st.Get(seq)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := DecodeHeader(enc)
		got, err := st.Header(seq)
		if err != nil || got != want {
			t.Fatalf("Header(%d) = %+v, %v; want %+v", seq, got, err, want)
		}
	}
	if _, err := st.Header(6); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Header past the journal: %v", err)
	}
	if err := st.MarkClosed(); err != nil {
		t.Fatal(err)
	}
	if unclean, err := st.Unclean(); err != nil || unclean {
		t.Fatalf("Unclean after MarkClosed: %v %v", unclean, err)
	}
}
