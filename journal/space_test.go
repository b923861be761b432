package journal

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestAppendsKeepTheReserve: an append that would leave less than the
// reserve free is refused with ErrJournalFull and ENOSPC, and stores
// nothing; Writable says so until an append goes in again, and counts
// the bytes still to come against the free space.
func TestAppendsKeepTheReserve(t *testing.T) {
	st, err := OpenStore(t.TempDir(), StoreOptions{LazyAppends: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ops := []Op{{Kind: KindWrite, Path: "f", Data: make([]byte, 4096)}}
	if _, _, err := st.Append(ops, time.Now(), 4096, false); err != nil {
		t.Fatal(err)
	}
	if err := st.Writable(0); err != nil {
		t.Fatalf("Writable with room: %v", err)
	}
	// Bytes captured and not yet journaled count against the free space.
	if err := st.Writable(st.FreeBytes()); !errors.Is(err, ErrJournalFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Writable with all the free space still to come: %v, want ErrJournalFull and ENOSPC", err)
	}
	st.space.reserve = 1 << 62 // more than any disk has
	_, _, err = st.Append(ops, time.Now(), 4096, false)
	if !errors.Is(err, ErrJournalFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append below the reserve: %v, want ErrJournalFull and ENOSPC", err)
	}
	if st.Last().Seq != 1 || st.Refusals() != 1 {
		t.Fatalf("after a refused append: last seq %d, %d refusals", st.Last().Seq, st.Refusals())
	}
	if err := st.Writable(0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Writable below the reserve: %v", err)
	}
	if st.FreeBytes() <= 0 {
		t.Fatalf("free bytes %d", st.FreeBytes())
	}
	st.space.reserve = 1
	if _, _, err := st.Append(ops, time.Now(), 4096, false); err != nil {
		t.Fatalf("append once there is room again: %v", err)
	}
	st.space.checked.Store(0) // Writable reads the disk again
	if err := st.Writable(0); err != nil || st.Last().Seq != 2 {
		t.Fatalf("after room came back: Writable %v, last seq %d", err, st.Last().Seq)
	}
}

// TestDefaultReserve: a quarter of the file system, 48 to 256 MiB.
func TestDefaultReserve(t *testing.T) {
	for _, c := range []struct{ size, want int64 }{
		{100 << 20, 48 << 20}, {400 << 20, 100 << 20}, {10 << 30, 256 << 20},
	} {
		if got := DefaultReserve(c.size); got != c.want {
			t.Errorf("DefaultReserve(%d) = %d, want %d", c.size, got, c.want)
		}
	}
}

// TestCloseGivesUp: Badger's Close retries forever when it cannot write
// its last table (here its directory was removed under it); Close returns
// ErrCloseTimeout instead of hanging the process that stops.
func TestCloseGivesUp(t *testing.T) {
	defer func(d time.Duration) { closeTimeout = d }(closeTimeout)
	closeTimeout = time.Second
	dir := t.TempDir()
	st, err := OpenStore(dir, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Append([]Op{{Kind: KindMkdir, Path: "d", Mode: 0o755}}, time.Now(), 0, false); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := st.Close(); !errors.Is(err, ErrCloseTimeout) {
		t.Fatalf("Close with its directory gone: %v, want ErrCloseTimeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Close took %v", took)
	}
}

// A store knows its free space from its opening: until the first append,
// pbfs status and pbfs_journal_free_bytes said "0 B free", as on a full
// disk.
func TestFreeSpaceKnownAtOpen(t *testing.T) {
	st, err := OpenStore(t.TempDir(), StoreOptions{LazyAppends: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.FreeBytes() <= 0 || st.ReserveBytes() <= 0 {
		t.Fatalf("before any append: %d bytes free, %d in reserve", st.FreeBytes(), st.ReserveBytes())
	}
}
