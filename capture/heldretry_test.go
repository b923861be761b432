package capture_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/capture"
	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/journal"
)

// TestHeldBatchRetriedWithoutBarrier: a barrier whose batch the journal
// refuses, while the committer waits on a seal timer an hour long, still
// gets the batch retried on its own once the journal's disk has room
// again; only that retry lets the service's writes in again
// (journal.Store.Writable says full until an append goes in).
func TestHeldBatchRetriedWithoutBarrier(t *testing.T) {
	disk := fstest.SmallFS(t, 160<<20)
	_, size := fstest.FreeSpace(t, disk)
	store, err := journal.OpenStore(filepath.Join(disk, "j"), journal.StoreOptions{LazyAppends: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	fs, h := fileOn(t, capture.Options{Capture: true, Space: store.Writable})
	c := capture.NewCommitter(fs, store, time.Hour, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	if _, err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	page := make([]byte, 4096)
	if _, err := fs.Write(h, 0, page, nil); err != nil {
		t.Fatal(err)
	}
	seq := store.Last().Seq
	// Let Run take up its wait with the batch open, on the hour-long seal
	// timer: the barrier's refusal must reach it there (5e5b8f7 missed it).
	time.Sleep(20 * time.Millisecond)
	ballast := fstest.TakeSpace(t, disk, journal.DefaultReserve(size)-8<<20)
	if _, err := c.Barrier(ctx); !errors.Is(err, journal.ErrJournalFull) || !c.Holding() {
		t.Fatalf("barrier with the journal's disk full: %v, holding %v; want ErrJournalFull and a held batch", err, c.Holding())
	}
	if _, err := fs.Write(h, 4096, page, nil); err == nil {
		t.Fatal("a write went in while the journal refuses a batch")
	}
	fstest.GiveSpace(t, ballast)
	for deadline := time.Now().Add(10 * time.Second); c.Holding(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the held batch was not retried within 10 s of the disk having room")
		}
	}
	if store.Last().Seq != seq+1 || store.Writable(0) != nil {
		t.Fatalf("after the retry: last seq %d, want %d; Writable %v", store.Last().Seq, seq+1, store.Writable(0))
	}
	if _, err := fs.Write(h, 4096, page, nil); err != nil {
		t.Fatalf("write once the held batch went in: %v", err)
	}
}

// fileOn makes an FS with o over a fresh directory and creates one file
// in it, open read-write.
func fileOn(t *testing.T, o capture.Options) (*capture.FS, *capture.Handle) {
	t.Helper()
	fd, err := unix.Open(t.TempDir(), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := capture.New(fd, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	_, h, _, err := fs.Create(fs.Root(), "data", unix.O_RDWR, 0o644, capture.Caller{}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Release(h) })
	return fs, h
}
