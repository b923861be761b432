package mount_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
	"github.com/pbfs/pbfs/replicate/backup"
)

// A mount whose volume is ahead of its journal (changed while unmounted),
// started with no backup yet (pbfs node, promoted while the other members
// were down), resyncs the first backup added, and its barriers return
// once that resync is done. Barriers waited forever before: the resync of
// "every backup" counted the backups at the start, none, so it never
// ended, and a backup added later was streamed the journal alone, lacking
// the offline change.
func TestBackupAddedLaterIsResyncedFromAnAheadVolume(t *testing.T) {
	fstest.RequireFUSE(t)
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := mount.Start(mount.Config{Mountpoint: vol, Journal: jdir})
	if err != nil {
		t.Fatal(err)
	}
	if err := fstest.WriteOwn(t, filepath.Join(vol, "mounted"), []byte("through the mount")); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "offline"), []byte("while unmounted"), 0o644); err != nil {
		t.Fatal(err)
	}

	m, err = mount.Start(mount.Config{Mountpoint: vol, Journal: jdir, Dynamic: true, Token: "t", Ack: "all"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if seq, err := m.Barrier(ctx); err == nil {
		t.Fatalf("barrier %d returned before any backup was resynced to the volume", seq)
	}

	bvol := filepath.Join(dir, "bvol")
	if err := os.Mkdir(bvol, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := backup.Open(backup.Config{Volume: bvol, Journal: filepath.Join(dir, "bj"), Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go b.Serve(ln)
	if err := m.AddBackup(ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	seq, err := m.Barrier(ctx2)
	if err != nil {
		t.Fatalf("barrier after a backup was added: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); b.Status().AppliedSeq < seq; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the backup never applied seq %d: %+v", seq, b.Status())
		}
	}
	for name, want := range map[string]string{"mounted": "through the mount", "offline": "while unmounted"} {
		if data, err := os.ReadFile(filepath.Join(bvol, name)); err != nil || string(data) != want {
			t.Fatalf("the backup's %s: %q, %v; want %q", name, data, err, want)
		}
	}
}
