package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/fstest"
)

// watcher runs pbfs events and keeps the events it prints.
type watcher struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	got []events.Event
}

func watchEvents(t *testing.T, args ...string) *watcher {
	t.Helper()
	w := &watcher{cmd: exec.Command(pbfsBin, append([]string{"events"}, args...)...)}
	out, err := w.cmd.StdoutPipe()
	must(t, err)
	must(t, w.cmd.Start())
	t.Cleanup(func() { w.cmd.Process.Signal(syscall.SIGINT); w.cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e events.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Errorf("pbfs events printed a line that is not an event: %q", sc.Text())
				continue
			}
			w.mu.Lock()
			w.got = append(w.got, e)
			w.mu.Unlock()
		}
	}()
	return w
}

// await waits for an event of kind whose attrs hold key=value ("" key:
// any).
func (w *watcher) await(t *testing.T, kind, key string, value any) events.Event {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		w.mu.Lock()
		for _, e := range w.got {
			if e.Kind == kind && (key == "" || e.Attrs[key] == value) {
				w.mu.Unlock()
				return e
			}
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Fatalf("no %s event with %s=%v; got %+v", kind, key, value, w.got)
	return events.Event{}
}

// pbfs events follows a primary's and a backup's state changes: the
// primary's role, a backup going down and up, a resync, a backup added
// and removed; the backup's primary connecting, through the admin port too.
func TestEventsStream(t *testing.T) {
	badmin := fstest.FreeAddr(t)
	c := fstest.NewCluster(t, 1, nil)
	b := c.Backups[0]
	c.RequireConverged()
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
	b.Args = append(b.Args, "--admin", badmin)
	pw := watchEvents(t, "--journal", c.Jdir)
	pw.await(t, events.KindRole, "role", "primary")
	pw.await(t, events.KindBackupDown, "backup", b.Addr)
	c.StartBackup(b)
	pw.await(t, events.KindBackupUp, "backup", b.Addr)
	bw := watchEvents(t, "--admin", badmin)
	bw.await(t, events.KindPrimaryUp, "", nil)

	if out, code := run(t, "resync", "--journal", c.Jdir, "--wait"); code != 0 {
		t.Fatalf("resync: %s", out)
	}
	pw.await(t, events.KindResyncStarted, "backup", b.Addr)
	pw.await(t, events.KindResyncDone, "backup", b.Addr)
	bw.await(t, events.KindResyncDone, "", nil)

	if out, code := run(t, "member", "remove", "--journal", c.Jdir, b.Addr); code != 0 {
		t.Fatalf("member remove: %s", out)
	}
	pw.await(t, events.KindBackupRemoved, "backup", b.Addr)
	bw.await(t, events.KindPrimaryDown, "", nil)
	if out, code := run(t, "member", "add", "--journal", c.Jdir, b.Addr); code != 0 {
		t.Fatalf("member add: %s", out)
	}
	pw.await(t, events.KindBackupAdded, "backup", b.Addr)
	c.RequireConverged()
	if out, code := run(t, "events"); code != 2 || !strings.Contains(out, "give --journal JDIR") {
		t.Errorf("events without a source: exit %d:\n%s", code, out)
	}
}
