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
		e := fstest.Setup(t, cfg, func(vol string) {
			os.WriteFile(filepath.Join(vol, "mapped"), bytes.Repeat([]byte{'.'}, 64<<10), 0o644)
		})
		fd, err := unix.Open(filepath.Join(e.Vol, "mapped"), unix.O_RDWR, 0)
		must(t, err)
		defer unix.Close(fd)
		data, err := unix.Mmap(fd, 0, 64<<10, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		must(t, err)
		defer unix.Munmap(data)
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
