package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/dockertest"
	"github.com/pbfs/pbfs/internal/fstest"
)

// The volume driver as an operator runs it: `pbfs volume-driver` serving a
// real Docker engine (a private dockerd, internal/dockertest), whose
// containers write through the driver's volumes to real backups.

// driverProc is a `pbfs volume-driver` process; restarting it keeps its
// state directory and socket.
type driverProc struct {
	name, socket, state, args string
	cmd                       *exec.Cmd
	out                       *fstest.Buffer
}

// startDriver starts a driver of a name of its own (the plugin directory
// is the machine's) whose volumes replicate with the test token. In
// Cleanup it stops, and so does every mount it left.
func startDriver(t *testing.T) *driverProc {
	fstest.RequireFUSE(t)
	dir, err := os.MkdirTemp("", "pbfs-vd-") // short: the mounts' control sockets live below it
	must(t, err)
	token, defaults := filepath.Join(dir, "token"), filepath.Join(dir, "defaults.yaml")
	must(t, os.WriteFile(token, []byte(fstest.TestToken), 0o600))
	must(t, os.WriteFile(defaults, []byte("token-file: "+token+"\n"), 0o644))
	name := fmt.Sprintf("pbfstest%d", os.Getpid())
	d := &driverProc{name: name, socket: "/run/docker/plugins/" + name + ".sock", state: filepath.Join(dir, "s"), args: defaults, out: &fstest.Buffer{}}
	t.Cleanup(func() {
		d.stop()
		d.unmountAll()
		os.RemoveAll(dir)
	})
	d.start(t)
	return d
}

func (d *driverProc) start(t *testing.T) {
	t.Helper()
	d.cmd = exec.Command(pbfsBin, "volume-driver", "--state-dir", d.state, "--socket", d.socket, "--defaults", d.args)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	must(t, d.cmd.Start())
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("unix", d.socket); err == nil {
			c.Close()
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("the driver did not come up:\n%s", d.out)
}

// kill kills the driver with SIGKILL; its socket stays behind, as a crash
// leaves it.
func (d *driverProc) kill() {
	fstest.KillHard(d.cmd.Process.Pid)
	d.cmd.Wait()
}

func (d *driverProc) stop() {
	if d.cmd.ProcessState == nil {
		d.cmd.Process.Signal(syscall.SIGINT)
		d.cmd.Wait()
	}
	os.Remove(d.socket)
}

// unmountAll unmounts every volume still mounted: its mount seals, ships
// and exits.
func (d *driverProc) unmountAll() {
	ents, _ := os.ReadDir(d.state)
	for _, e := range ents {
		data := d.data(e.Name())
		for i := 0; i < 100 && fstest.Mounted(data); i++ {
			syscall.Unmount(data, 0)
			time.Sleep(50 * time.Millisecond)
		}
		fstest.DetachAll(data)
	}
}

func (d *driverProc) data(vol string) string { return filepath.Join(d.state, vol, "data") }

// awaitUnmounted waits for the volume's last unmount.
func (d *driverProc) awaitUnmounted(t *testing.T, e *dockertest.Engine, vol string, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for fstest.Mounted(d.data(vol)) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still mounted after %s\ndriver:\n%s\ndockerd:\n%s", vol, wait, d.out, e.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// volumeStatus is what `docker volume inspect` shows of the driver's Get.
type volumeStatus struct {
	Mountpoint string
	Status     struct {
		Mounted    bool   `json:"mounted"`
		Containers int    `json:"containers"`
		LastSeq    uint64 `json:"last_seq"`
		Backups    []struct {
			Addr, State string
			LagBatches  uint64 `json:"lag_batches"`
		} `json:"backups"`
	}
}

func inspect(t *testing.T, e *dockertest.Engine, vol string) volumeStatus {
	t.Helper()
	out, err := e.Docker("volume", "inspect", vol)
	if err != nil {
		t.Fatalf("docker volume inspect %s: %v\n%s", vol, err, out)
	}
	var vs []volumeStatus
	if err := json.Unmarshal([]byte(out), &vs); err != nil || len(vs) != 1 {
		t.Fatalf("docker volume inspect %s: %v\n%s", vol, err, out)
	}
	return vs[0]
}

// docker runs docker and fails the test if it fails.
func docker(t *testing.T, e *dockertest.Engine, args ...string) string {
	t.Helper()
	out, err := e.Docker(args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// refused runs docker, wants it to fail with want in its words, and
// returns them.
func refused(t *testing.T, e *dockertest.Engine, want string, args ...string) string {
	t.Helper()
	out, err := e.Docker(args...)
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("docker %s: %v, want a refusal saying %q:\n%s", strings.Join(args, " "), err, want, out)
	}
	return out
}
