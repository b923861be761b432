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
	// The replica starts as the volume did (a tmpfs root is 1777).
	must(t, os.Chmod(vol, 0o755))
	replica := t.TempDir()
	p := fstest.StartMount(t, nil, vol, filepath.Join(t.TempDir(), "j"))
	err := os.WriteFile(filepath.Join(vol, "big"), bytes.Repeat([]byte("x"), 4<<20), 0o644)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 4 MiB to a 2 MiB volume: %v, want ENOSPC", err)
	}
	must(t, os.Remove(filepath.Join(vol, "big")))
	must(t, os.WriteFile(filepath.Join(vol, "small"), []byte("fits"), 0o644))
	if p.Counter("pbfs_fs_backing_errors_total", "ENOSPC") == 0 {
		t.Error("ENOSPC was not counted in pbfs_fs_backing_errors_total")
	}
	if !strings.Contains(p.Out.String(), "no space left on device") {
		t.Error("ENOSPC was not logged")
	}
	c := p.Client()
	if _, err := c.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := fstest.Snapshot(t, vol)
	a, err := apply.New(replica, nil)
	must(t, err)
	defer a.Close()
	_, err = journal.Walk(c, 0, 0, true, func(k journal.Checked) error {
		if k.Err != nil {
			return k.Err
		}
		return a.Apply(k.Batch)
	})
	must(t, err)
	fstest.RequireEqual(t, want, fstest.Snapshot(t, replica), "replica after ENOSPC")
}
