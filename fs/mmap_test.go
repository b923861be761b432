package fs_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// TestBarrierCoversSharedMappings is invariant 2 for stores through a
// writable shared mapping: a barrier taken right after the store, with the
// mapping and every descriptor still open (no msync, no close that would
// write the page back), covers it. Before barriers wrote the mount's dirty
// pages back, none of 50 such stores was in the batch the barrier returned;
// the kernel sent them 10-30 s later.
func TestBarrierCoversSharedMappings(t *testing.T) {
	eachMount(t, mount.Config{}, func(t *testing.T, cfg mount.Config) {
		e, data := setupMapped(t, cfg)
		for round := 0; round < 50; round++ {
			page := round % 16
			want := fmt.Sprintf("round %02d stored through the mapping", round)
			copy(data[page*4096:], want)
			e.Barrier()
			e.ReplayInto(e.Start)
			got, err := os.ReadFile(filepath.Join(e.Start, "mapped"))
			must(t, err)
			if !bytes.HasPrefix(got[page*4096:], []byte(want)) {
				t.Fatalf("round %d: the barrier returned without the store through the mapping: replay has %q",
					round, got[page*4096:page*4096+len(want)])
			}
		}
	})
}

// TestBarrierUnderSteadyTruncates takes barriers while other callers
// truncate files in a loop, with a store through a shared mapping before
// each barrier. Every barrier must succeed and cover its store: a flush
// round that sees a truncate in flight is followed by another, and a
// steady stream of truncates once failed barriers after four rounds.
func TestBarrierUnderSteadyTruncates(t *testing.T) {
	t.Setenv("PBFS_FAILPOINT_TRUNCATE_DELAY", "2ms") // a truncate is nearly always in flight
	e, data := setupMapped(t, mount.Config{})
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { // before the unmount, also when the test fails
		close(stop)
		for w := 0; w < 3; w++ {
			<-done
		}
	})
	for w := 0; w < 3; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			f, err := os.Create(filepath.Join(e.Vol, fmt.Sprintf("trunc%d", w)))
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				f.Truncate(int64(i%7) * 4096)
			}
		}()
	}
	for round := 0; round < 100; round++ {
		want := fmt.Sprintf("round %03d stored through the mapping", round)
		copy(data[(round%16)*4096:], want)
		e.Barrier()
		if round%20 != 19 {
			continue
		}
		e.ReplayInto(e.Start)
		got, err := os.ReadFile(filepath.Join(e.Start, "mapped"))
		must(t, err)
		if off := (round % 16) * 4096; !bytes.HasPrefix(got[off:], []byte(want)) {
			t.Fatalf("round %d: the barrier returned without the store through the mapping", round)
		}
	}
}

// setupMapped mounts a volume holding a 64 KiB file "mapped" and maps it
// shared and writable; the mapping and its descriptor stay open until the
// test ends (before the unmount).
func setupMapped(t *testing.T, cfg mount.Config) (*fstest.Env, []byte) {
	e := fstest.Setup(t, cfg, func(vol string) {
		os.WriteFile(filepath.Join(vol, "mapped"), bytes.Repeat([]byte{'.'}, 64<<10), 0o644)
	})
	fd, err := unix.Open(filepath.Join(e.Vol, "mapped"), unix.O_RDWR, 0)
	must(t, err)
	data, err := unix.Mmap(fd, 0, 64<<10, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Munmap(data)
		unix.Close(fd)
	})
	return e, data
}
