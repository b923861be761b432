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

// A getattr answered before a change but taken in by the kernel after it
// used to put the old attributes back in the kernel's cache for a second
// (fs.Server.attrsChanged), and a comparison with a backup right after a
// barrier saw the primary behind. These tests change several nodes, each
// stat'ed by three threads meanwhile, then compare what a stat says at
// once with what it says once the kernel's cache has expired.

// TestDirMtimeFreshAfterChange: directories whose entries change.
func TestDirMtimeFreshAfterChange(t *testing.T) {
	e := fstest.Setup(t, mount.Config{}, nil)
	requireFreshAttrs(t, e, func(t *testing.T, p string) {
		os.Mkdir(p, 0o755)
	}, func(t *testing.T, p string) {
		for j := 0; j < 30; j++ {
			x := filepath.Join(p, "x")
			if err := unix.Mknod(x, unix.S_IFIFO|0o644, 0); err != nil {
				t.Error(err)
				return
			}
			if err := os.Remove(x); err != nil {
				t.Error(err)
				return
			}
		}
	})
}

// TestFileMtimeFreshAfterPunch: a file with holes punched in it.
func TestFileMtimeFreshAfterPunch(t *testing.T) {
	e := fstest.Setup(t, mount.Config{}, nil)
	requireFreshAttrs(t, e, func(t *testing.T, p string) {
		must(t, os.WriteFile(p, make([]byte, 1<<16), 0o644))
	}, func(t *testing.T, p string) {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		for j := 0; j < 30; j++ {
			if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(j*1024), 1024); err != nil {
				t.Error(err)
				return
			}
		}
	})
}

// requireFreshAttrs makes four nodes with create, then, for eight rounds,
// changes each with change while three threads stat it, and fails if a
// stat right after the changes differs from one after the cache expired.
// change runs in a goroutine of its own: it reports with t.Error.
func requireFreshAttrs(t *testing.T, e *fstest.Env, create, change func(t *testing.T, p string)) {
	const nodes, rounds = 4, 8
	paths := make([]string, 0, nodes)
	for i := 0; i < nodes; i++ {
		paths = append(paths, filepath.Join(e.Vol, fmt.Sprint("n", i)))
	}
	stale := 0
	for round := 0; round < rounds; round++ {
		var stop atomic.Bool
		var statters, changers sync.WaitGroup
		for _, p := range paths {
			create(t, p)
			for g := 0; g < 3; g++ {
				statters.Go(func() {
					var st unix.Stat_t
					for !stop.Load() {
						unix.Lstat(p, &st)
					}
				})
			}
			changers.Go(func() { change(t, p) })
		}
		changers.Wait()
		stop.Store(true)
		statters.Wait()
		seen := make([]unix.Stat_t, nodes)
		for i, p := range paths {
			must(t, unix.Lstat(p, &seen[i]))
		}
		time.Sleep(time.Second + 200*time.Millisecond) // the kernel's cache (cacheValid) expires
		for i, p := range paths {
			var st unix.Stat_t
			must(t, unix.Lstat(p, &st))
			if st.Mtim != seen[i].Mtim {
				stale++
				t.Logf("round %d, %s: a stat right after the change saw an mtime %v older", round, filepath.Base(p), time.Duration(st.Mtim.Nano()-seen[i].Mtim.Nano()))
			}
		}
	}
	if stale > 0 {
		t.Fatalf("%d of %d stats right after a change saw a stale mtime", stale, nodes*rounds)
	}
}
