package fs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// TestDirMtimeFreshAfterChange: a stat of a directory right after its
// entries changed shows the change, even while other threads stat it.
// A getattr answered before the change but taken in by the kernel after
// it used to put the old mtime back in the kernel's cache for a second,
// and a comparison with a backup right after a barrier saw the primary
// behind (fs.Server.dirChanged). Each round churns several directories,
// each stat'ed by three threads, then compares what a stat says at once
// with what it says once the kernel's cache has expired.
func TestDirMtimeFreshAfterChange(t *testing.T) {
	e := fstest.Setup(t, mount.Config{}, nil)
	const dirs, rounds = 4, 8
	stale := 0
	for round := 0; round < rounds; round++ {
		var stop atomic.Bool
		var statters, churners sync.WaitGroup
		for i := 0; i < dirs; i++ {
			d := filepath.Join(e.Vol, fmt.Sprint("d", i))
			os.Mkdir(d, 0o755)
			for g := 0; g < 3; g++ {
				statters.Go(func() {
					var st unix.Stat_t
					for !stop.Load() {
						unix.Lstat(d, &st)
					}
				})
			}
			churners.Go(func() {
				for j := 0; j < 30; j++ {
					p := filepath.Join(d, "x")
					if err := unix.Mknod(p, unix.S_IFIFO|0o644, 0); err != nil {
						t.Error(err)
						return
					}
					must(t, os.Remove(p))
				}
			})
		}
		churners.Wait()
		stop.Store(true)
		statters.Wait()
		seen := make([]unix.Stat_t, dirs)
		for i := range seen {
			must(t, unix.Lstat(filepath.Join(e.Vol, fmt.Sprint("d", i)), &seen[i]))
		}
		time.Sleep(time.Second + 200*time.Millisecond) // the kernel's cache (cacheValid) expires
		for i := range seen {
			var st unix.Stat_t
			must(t, unix.Lstat(filepath.Join(e.Vol, fmt.Sprint("d", i)), &st))
			if st.Mtim != seen[i].Mtim {
				stale++
				t.Logf("round %d, d%d: a stat right after the change saw an mtime %v older", round, i, time.Duration(st.Mtim.Nano()-seen[i].Mtim.Nano()))
			}
		}
	}
	if stale > 0 {
		t.Fatalf("%d of %d stats right after a change saw a stale directory mtime", stale, dirs*rounds)
	}
}
