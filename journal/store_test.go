package journal

import (
	"testing"
	"time"
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
