package fs_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/mount"
)

// TestBackingENOSPC puts the volume on a 2 MiB tmpfs and fills it: the
// writer gets ENOSPC, the error is counted, the mount keeps serving, and
// the journal still replays to the same tree.
func TestBackingENOSPC(t *testing.T) {
	fstest.RequireFUSE(t)
	vol := t.TempDir()
	if err := syscall.Mount("tmpfs", vol, "tmpfs", 0, "size=2m"); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(vol, syscall.MNT_DETACH) })
	jdir := filepath.Join(t.TempDir(), "j")
	m, err := mount.Start(mount.Config{Mountpoint: vol, Journal: jdir})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	err = os.WriteFile(filepath.Join(vol, "big"), bytes.Repeat([]byte("x"), 4<<20), 0o644)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 4 MiB to a 2 MiB volume: %v, want ENOSPC", err)
	}
	must(t, os.Remove(filepath.Join(vol, "big")))
	must(t, os.WriteFile(filepath.Join(vol, "small"), []byte("fits"), 0o644))
	n := counter(t, m, "pbfs_fs_backing_errors_total", "ENOSPC")
	if n == 0 {
		t.Error("ENOSPC was not counted in pbfs_fs_backing_errors_total")
	}
	if _, err := m.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := fstest.Snapshot(t, vol)
	replica := t.TempDir()
	a, err := apply.New(replica, nil)
	must(t, err)
	defer a.Close()
	_, err = journal.Walk(m, 0, 0, true, func(c journal.Checked) error {
		if c.Err != nil {
			return c.Err
		}
		return a.Apply(c.Batch)
	})
	must(t, err)
	fstest.RequireEqual(t, want, fstest.Snapshot(t, replica), "replica after ENOSPC")
}

// counter sums the series of a counter in the mount's registry that carry
// a label value containing label.
func counter(t *testing.T, m *mount.Mount, name, label string) float64 {
	mfs, err := m.Registry().Gather()
	must(t, err)
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if strings.Contains(l.GetValue(), label) {
					v += s.GetCounter().GetValue()
				}
			}
		}
	}
	return v
}
