package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// A mount whose log reader goes away (its stderr a pipe, closed) keeps
// serving: it used to die of SIGPIPE at its next log line and leave a dead
// mount under the service.
func TestMountOutlivesItsLogReader(t *testing.T) {
	fstest.RequireFUSE(t)
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	must(t, os.Mkdir(vol, 0o755))
	r, w, err := os.Pipe()
	must(t, err)
	cmd := exec.Command(pbfsBin, "--log-level", "debug", "mount", "--journal", jdir, vol)
	cmd.Stdout, cmd.Stderr = w, w
	must(t, cmd.Start())
	w.Close()
	t.Cleanup(func() {
		fstest.StopProcess(cmd, os.Interrupt, 20*time.Second)
		fstest.DetachAll(vol)
	})
	for deadline := time.Now().Add(10 * time.Second); !fstest.Mounted(vol); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the mount never came up")
		}
	}
	r.Close() // the reader goes away
	for i := 0; i < 20; i++ {
		if err := os.WriteFile(filepath.Join(vol, fmt.Sprint("f", i)), []byte("data"), 0o644); err != nil {
			t.Fatalf("write %d after the log reader went away: %v", i, err)
		}
		if out, code := run(t, "barrier", "--journal", jdir); code != 0 {
			t.Fatalf("barrier %d after the log reader went away: %s", i, out)
		}
	}
	if cmd.ProcessState != nil {
		t.Fatalf("the mount exited: %v", cmd.ProcessState)
	}
}
