package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// Unmounts from outside pbfs: umount(8), umount -l and fusermount3 -u,
// as an operator, systemd or an fstab entry's `umount` does them.

// unmountFromOutside unmounts dir with argv (its last argument is dir),
// trying again while the volume is busy (a writer has a file open).
func unmountFromOutside(t *testing.T, dir string, argv ...string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		out, err := exec.Command(argv[0], append(argv[1:], dir)...).CombinedOutput()
		if err == nil {
			return
		}
		if !strings.Contains(string(out), "busy") || time.Now().After(deadline) {
			t.Fatalf("%s %s: %v\n%s", strings.Join(argv, " "), dir, err, out)
		}
	}
}

// TestRemountRightAfterUmount: `umount; mount` works with no wait between
// them. After umount(2) returns, the old daemon still seals, ships and
// fingerprints the volume, and holds the backing directory while it does;
// the new mount waits for it to let go instead of being refused ("another
// pbfs process holds it"), its --admin address included, and the old one
// exits 0 with the journal closed cleanly.
func TestRemountRightAfterUmount(t *testing.T) {
	fstest.RequireFUSE(t)
	dir := t.TempDir()
	vol, start, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "start"), filepath.Join(dir, "j")
	// Entries enough that the old daemon's stop outlasts the new one's
	// start every time.
	for d := 0; d < 4; d++ {
		sub := filepath.Join(vol, fmt.Sprintf("d%d", d))
		must(t, os.MkdirAll(sub, 0o755))
		for f := 0; f < 1000; f++ {
			must(t, os.WriteFile(filepath.Join(sub, fmt.Sprint(f)), nil, 0o644))
		}
	}
	must(t, os.Mkdir(start, 0o755))
	fstest.CopyTree(t, vol, start)
	var procs []*fstest.Proc
	admin := fstest.FreeAddr(t) // each mount's too: the old one lets it go before the new one takes it
	for round := 0; round < 4; round++ {
		p := startMount(t, nil, vol, jdir, "--admin", admin)
		procs = append(procs, p)
		requireFindmnt(t, vol, vol)
		must(t, os.WriteFile(filepath.Join(vol, fmt.Sprintf("round-%d", round)), bytes.Repeat([]byte{byte(round)}, 5000), 0o644))
		unmountFromOutside(t, vol, "umount")
	}
	for i, p := range procs {
		if code := waitExit(t, p, 30*time.Second); code != 0 {
			t.Fatalf("mount %d: exit %d after umount:\n%s", i, code, p.Out)
		}
		if out := p.Out.String(); strings.Contains(out, "did not shut down cleanly") || strings.Contains(out, "holds it") {
			t.Fatalf("mount %d:\n%s", i, out)
		}
	}
	if out, code := run(t, "journal", "replay", "--journal", jdir, start); code != 0 {
		t.Fatalf("replay: exit %d\n%s", code, out)
	}
	fstest.RequireEqual(t, fstest.Snapshot(t, vol), fstest.Snapshot(t, start), "replay vs volume")
}

// busyWriter writes files into dir until stopped, each in a few pieces
// with pauses between, so that files are open when an unmount comes.
type busyWriter struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

func startBusyWriter(dir string) *busyWriter {
	w := &busyWriter{stop: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%04d", i)))
			if err != nil {
				time.Sleep(time.Millisecond)
				continue
			}
			for piece := 0; piece < 4; piece++ {
				f.Write(bytes.Repeat([]byte{byte(i), byte(piece)}, 2048))
				time.Sleep(200 * time.Microsecond)
			}
			f.Close()
		}
	}()
	return w
}

func (w *busyWriter) end() {
	close(w.stop)
	w.wg.Wait()
}

// TestUnmountFromOutsideSealsAndShips: unmounted from outside while a
// writer is busy (umount(8), which waits until no file is open; umount -l,
// which detaches while one is; fusermount3 -u), pbfs seals, ships and
// exits 0, as on SIGTERM (the last case): every write that reached it is
// in the journal and on the backup, and it unmounts nothing itself. It used to exit 1
// ("mount went away", then "fusermount3: failed to unmount: Invalid
// argument") with the journal left open. The volume is a backing
// directory mounted elsewhere, so what the writer writes after the
// unmount lands beside it, and the backing directory holds exactly what
// pbfs applied.
func TestUnmountFromOutsideSealsAndShips(t *testing.T) {
	for _, argv := range [][]string{{"umount"}, {"umount", "-l"}, {"fusermount3", "-u"}, {"SIGTERM"}} {
		t.Run(strings.Join(argv, " "), func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "src")
			must(t, os.Mkdir(src, 0o755))
			c := fstest.NewCluster(t, 1, nil, "--backing", src)
			c.RequireConverged() // the backup's first resync is over
			requireFindmnt(t, src, c.Vol)
			w := startBusyWriter(c.Vol)
			time.Sleep(300 * time.Millisecond)
			if argv[0] == "SIGTERM" { // the same, stopped as ever
				c.Primary.Cmd.Process.Signal(syscall.SIGTERM)
			} else {
				unmountFromOutside(t, c.Vol, argv...)
			}
			time.Sleep(50 * time.Millisecond)
			w.end()
			if code := waitExit(t, c.Primary, 30*time.Second); code != 0 {
				t.Fatalf("exit %d after %s:\n%s", code, argv[0], c.Primary.Out)
			}
			out := c.Primary.Out.String()
			for _, bad := range []string{"failed to unmount", "Invalid argument", "did not", "ERROR"} {
				if strings.Contains(out, bad) {
					t.Fatalf("the stop says %q:\n%s", bad, out)
				}
			}
			want := fstest.Snapshot(t, src)
			if len(want) < 10 {
				t.Fatalf("only %d entries reached pbfs before the unmount", len(want))
			}
			// The backup acked the last batch before pbfs exited; it
			// applies it on its own.
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if len(fstest.Diff(want, fstest.Snapshot(t, c.Backups[0].Vol), 1)) == 0 {
					break
				}
				if time.Now().After(deadline) {
					fstest.RequireEqual(t, want, fstest.Snapshot(t, c.Backups[0].Vol), "backup vs backing directory")
				}
			}
			start := t.TempDir()
			if out, code := run(t, "journal", "replay", "--journal", c.Jdir, start); code != 0 {
				t.Fatalf("replay: exit %d\n%s", code, out)
			}
			fstest.RequireEqual(t, want, fstest.Snapshot(t, start), "replay vs backing directory")
		})
	}
}

// TestLazyUnmountFromOutsideEditIsResynced: a volume mounted over itself
// and unmounted lazily from outside while the service holds a file open
// is the bare directory from then on; what is written straight into it
// (here well before the service closes its file and the connection ends)
// never came through pbfs, and the restart must find it and resync the
// backup. pbfs notices the unmount when the mount leaves the mount table,
// not when the connection ends.
func TestLazyUnmountFromOutsideEditIsResynced(t *testing.T) {
	c := fstest.NewCluster(t, 1, func(vol string) {
		os.WriteFile(filepath.Join(vol, "held"), []byte("held open"), 0o644)
	})
	c.RequireConverged()
	held, err := os.OpenFile(filepath.Join(c.Vol, "held"), os.O_WRONLY, 0)
	must(t, err)
	unmountFromOutside(t, c.Vol, "umount", "-l")
	_, err = held.WriteAt([]byte("HELD"), 0) // through the detached mount
	must(t, err)
	must(t, os.WriteFile(filepath.Join(c.Vol, "written-after-the-unmount"), []byte("straight to the directory"), 0o644))
	time.Sleep(1500 * time.Millisecond)
	held.Close()
	if code := waitExit(t, c.Primary, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after umount -l:\n%s", code, c.Primary.Out)
	}
	restartResyncs(t, c, "the write straight into the unmounted volume")
}
