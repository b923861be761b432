package capture

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"
)

// oneFile makes an FS with opts over a fresh directory (dir, its
// descriptor) and creates one file, "data", in it, open read-write; both
// go at the test's end.
func oneFile(t *testing.T, opts Options) (f *FS, h *Handle, dir int) {
	t.Helper()
	fd, err := unix.Open(t.TempDir(), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f, err = New(fd, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, h, _, err = f.Create(f.Root(), "data", unix.O_RDWR, 0o644, Caller{}, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Release(h) })
	return f, h, fd
}

// TestSpaceCountsUnjournaled: Options.Space is asked with every byte
// captured and not yet through the journal, the open batch and the sealed
// batch in flight alike, so the mount can refuse writes before they add up
// to more than the journal's disk can take. A refused write reaches
// neither the backing file nor the batch.
func TestSpaceCountsUnjournaled(t *testing.T) {
	const limit = 16 * 4096
	var asked int64
	f, h, fd := oneFile(t, Options{Capture: true, MaxBatchBytes: 64 << 20, Metrics: NewMetrics(nil),
		Space: func(unjournaled int64) error {
			asked = unjournaled
			if unjournaled >= limit {
				return fmt.Errorf("test journal full: %w", syscall.ENOSPC)
			}
			return nil
		}})

	write := func(i int) error {
		_, err := f.Write(h, int64(i)*4096, page, nil)
		return err
	}
	// Unjournaled counts what the batch holds in memory, at least the
	// bytes written (the create op and buffer slack come on top).
	n := 0
	for ; n < 16; n++ {
		if err := write(n); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write %d past the limit: %v, want ENOSPC", n, err)
			}
			break
		}
	}
	if n < 8 || n == 16 {
		t.Fatalf("%d pages went in below a limit of %d bytes", n, limit)
	}
	held := f.Unjournaled()
	if asked != held || held < limit || held < int64(n)*4096 {
		t.Fatalf("Space asked with %d, Unjournaled %d, after %d pages and a limit of %d", asked, held, n, limit)
	}
	var m dto.Metric
	if err := f.m.Refused.Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Fatalf("%v writes counted as refused (%v), want 1", m.GetCounter().GetValue(), err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(fd, "data", &st, 0); err != nil || st.Size != int64(n)*4096 {
		t.Fatalf("backing file is %d bytes (%v), want %d: the refused write went through", st.Size, err, n*4096)
	}

	s := f.Seal()
	if f.Unjournaled() != held {
		t.Fatalf("sealed, not released: Unjournaled %d, want %d", f.Unjournaled(), held)
	}
	if err := write(n); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write while the sealed batch is in flight: %v, want ENOSPC", err)
	}
	s.Release()
	s.Release() // idempotent
	if f.Unjournaled() != 0 {
		t.Fatalf("released: Unjournaled %d, want 0", f.Unjournaled())
	}
	if err := write(n); err != nil {
		t.Fatalf("write once the batch is journaled: %v", err)
	}
	if u := f.Unjournaled(); u < 4096 || u >= held {
		t.Fatalf("Unjournaled %d after one more page into a new batch", u)
	}
}

// TestStuckJournalFailsWaitingWrites: while the journal refuses every
// batch (for a reason other than space), a write waiting for room fails
// with ErrJournalStuck after StuckLimit, rather than keep the service's
// thread in a FUSE request it cannot be killed out of; once the journal
// takes batches again, writes wait (and then go) as before.
func TestStuckJournalFailsWaitingWrites(t *testing.T) {
	f, h, _ := oneFile(t, Options{Capture: true, MaxBatchBytes: 4096, Metrics: NewMetrics(nil)})
	for i := 0; f.pending.Load() <= 2*4096; i++ {
		if _, err := f.Write(h, int64(i)*4096, page, nil); err != nil {
			t.Fatalf("write %d below the throttle: %v", i, err)
		}
	}
	old := StuckLimit
	StuckLimit = 50 * time.Millisecond
	defer func() { StuckLimit = old }()
	f.Stuck(true)
	done := make(chan error, 1)
	go func() {
		_, err := f.Write(h, 1<<20, page, nil)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a throttled write returned at once: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	f.WakeWriters() // the committer's next failed retry
	select {
	case err := <-done:
		if !errors.Is(err, ErrJournalStuck) {
			t.Fatalf("throttled write on a stuck journal: %v, want ErrJournalStuck", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a throttled write still waits on a journal stuck past StuckLimit")
	}
	f.Stuck(false)
	go func() {
		_, err := f.Write(h, 2<<20, page, nil)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a write on a journal taking batches again was not throttled: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	s := f.Seal()
	s.Release()
	f.WakeWriters()
	if err := <-done; err != nil {
		t.Fatalf("write once the batch was sealed: %v", err)
	}
}
