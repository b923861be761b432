package main

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
)

// TestResyncKeepsAllocation: the primary is killed with kill -9 under
// load, and the remount resyncs its backups: one that replayed every
// batch, and one whose volume and journal were wiped meanwhile. Both end
// with the primary's allocation, not only its bytes: preallocation past
// the end (fallocate KEEP_SIZE), space allocated and never written inside
// it, zeros written (data, not holes) and holes. A resync used to
// truncate every file to its size, which freed what lay past it, and to
// punch every page of zeros; the trees compared equal all the same.
func TestResyncKeepsAllocation(t *testing.T) {
	c := fstest.NewCluster(t, 2, nil)
	c.Workload(7, 150, nil)
	const k = 4096
	layOut(t, c.Vol, "prealloc", func(f *os.File) {
		pwrite(t, f, 0, bytes.Repeat([]byte{'p'}, 10000))
		must(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, 4<<20))
	})
	layOut(t, c.Vol, "unwritten", func(f *os.File) {
		must(t, unix.Fallocate(int(f.Fd()), 0, 0, 1<<20))
		pwrite(t, f, 256*k, bytes.Repeat([]byte{'u'}, k))
	})
	layOut(t, c.Vol, "zeros", func(f *os.File) {
		pwrite(t, f, 0, make([]byte, 64*k))
		pwrite(t, f, 64*k, bytes.Repeat([]byte{'z'}, k))
	})
	layOut(t, c.Vol, "sparse", func(f *os.File) {
		must(t, f.Truncate(8<<20))
		pwrite(t, f, 4<<20, bytes.Repeat([]byte{'s'}, k))
	})
	t.Log("laid out")
	c.RequireConverged() // replaying keeps allocation
	t.Log("converged")

	// Written after the last barrier: the volume is ahead of the backups.
	layOut(t, c.Vol, "late", func(f *os.File) {
		pwrite(t, f, 0, make([]byte, 16*k))
		must(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 16*k, 1<<20))
	})
	c.Workload(8, 100, nil)
	c.Primary.Kill()
	wiped := c.Backups[1]
	wiped.Cmd.Process.Signal(syscall.SIGINT)
	wiped.Cmd.Wait()
	must(t, os.RemoveAll(wiped.Jdir))
	must(t, os.RemoveAll(wiped.Vol))
	must(t, os.Mkdir(wiped.Vol, 0o755))
	c.StartBackup(wiped)
	c.Primary = startMount(t, nil, c.Vol, c.Jdir, "--backup", c.Backups[0].Addr, "--backup", wiped.Addr, "--ack", "all")
	c.RequireConverged()

	want := fstest.Snapshot(t, c.Vol)
	for _, name := range []string{"prealloc", "unwritten", "zeros", "sparse", "late"} {
		if want[name].Alloc == "" {
			t.Fatalf("%s: the primary's allocation could not be read, and was not compared", name)
		}
	}
	for i, b := range c.Backups {
		var st unix.Stat_t
		must(t, unix.Stat(filepath.Join(b.Vol, "prealloc"), &st))
		if st.Blocks*512 < 4<<20 {
			t.Errorf("backup %d: prealloc holds %d KiB, the primary 4 MiB", i, st.Blocks/2)
		}
		f, err := os.Open(filepath.Join(b.Vol, "zeros"))
		must(t, err)
		if off, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA); err != nil || off != 0 {
			t.Errorf("backup %d: the zeros written at 0 are a hole (data from %d, %v)", i, off, err)
		}
		f.Close()
	}
}

// layOut creates name in vol and has fn lay out its blocks.
func layOut(t *testing.T, vol, name string, fn func(*os.File)) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(vol, name), os.O_RDWR|os.O_CREATE, 0o644)
	must(t, err)
	defer f.Close()
	fn(f)
}

func pwrite(t *testing.T, f *os.File, off int64, b []byte) {
	t.Helper()
	_, err := f.WriteAt(b, off)
	must(t, err)
}
