// Package dockertest runs a private Docker engine for tests: dockerd with
// its own data root, exec root, containerd namespace and API socket in a
// temporary directory, so it never meets another engine on the machine,
// and an image built from the machine's static busybox, since no image
// registry is reachable. Only the plugin directory, /run/docker/plugins,
// is shared: give a test's volume driver a name of its own.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/mountinfo"
)

// Image is the busybox image Start imports.
const Image = "pbfs-test:busybox"

// Engine is a running dockerd.
type Engine struct {
	t    testing.TB
	Dir  string
	Host string // DOCKER_HOST for its API socket
	cmd  *exec.Cmd
	log  *fstest.Buffer
	cli  string
}

// Start starts an engine and imports Image into it; it stops in Cleanup,
// with its containers. It skips the test, saying why, when the machine
// cannot run one: no dockerd or docker command, no static busybox, or a
// daemon that does not come up or cannot run a container here.
func Start(t testing.TB) *Engine {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a container engine needs root")
	}
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		t.Skip("no container engine: dockerd is not installed (apt-get install docker.io)")
	}
	cli, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("no container engine: the docker command is not installed (apt-get install docker.io)")
	}
	busybox := staticBusybox(t)
	dir, err := os.MkdirTemp("", "pbfs-dockerd-")
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{t: t, Dir: dir, Host: "unix://" + filepath.Join(dir, "docker.sock"), log: &fstest.Buffer{}, cli: cli}
	ns := fmt.Sprintf("pbfs-test-%d", os.Getpid())
	e.cmd = exec.Command(dockerd, "--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"), "-H", e.Host, "--containerd-namespace", ns,
		"--containerd-plugins-namespace", ns+"-plugins", "--bridge=none", "--iptables=false", "--ip6tables=false",
		"--ip-masq=false", "--storage-driver=vfs", "--log-level=warn")
	e.cmd.Stdout, e.cmd.Stderr = e.log, e.log
	if err := e.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		t.Skipf("no container engine: dockerd does not start: %v", err)
	}
	t.Cleanup(e.stop)
	e.await()
	if out, err := e.importImage(busybox); err != nil {
		t.Fatalf("import the busybox image: %v\n%s", err, out)
	}
	if out, err := e.Docker("run", "--rm", "--network", "none", Image, "true"); err != nil {
		t.Skipf("no container engine: dockerd runs no container on this machine: %v\n%s\ndockerd:\n%s", err, out, e.log)
	}
	return e
}

// staticBusybox finds a statically linked busybox, which runs in a root
// file system of its own.
func staticBusybox(t testing.TB) string {
	p, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no image to run: busybox is not installed (apt-get install busybox-static)")
	}
	f, err := elf.Open(p)
	if err != nil {
		t.Skipf("no image to run: %s: %v", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Skipf("no image to run: %s is linked dynamically (apt-get install busybox-static)", p)
		}
	}
	return p
}

// await waits until the engine answers.
func (e *Engine) await() {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := e.Docker("version"); err == nil {
			return
		}
		if e.cmd.ProcessState != nil || syscall.Kill(e.cmd.Process.Pid, 0) != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Skipf("no container engine: dockerd did not come up:\n%s", e.log)
}

// importImage imports a root file system of busybox and its applets.
func (e *Engine) importImage(busybox string) (string, error) {
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "tmp/", "etc/", "data/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))})
	tw.Write(bin)
	for _, applet := range []string{"sh", "cat", "chmod", "chown", "echo", "id", "ls", "mkdir", "rm", "seq", "sleep", "stat", "sync", "test", "true", "wc"} {
		tw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	cmd := e.command(context.Background(), "import", "-", Image)
	cmd.Stdin = &buf
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Docker runs the docker command against the engine and returns its
// combined output.
func (e *Engine) Docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := e.command(ctx, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Start starts docker with args without waiting for it.
func (e *Engine) Start(args ...string) *exec.Cmd {
	cmd := e.command(context.Background(), args...)
	out := &fstest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	return cmd
}

func (e *Engine) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.cli, args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+e.Host, "DOCKER_CONFIG="+filepath.Join(e.Dir, "cli"))
	return cmd
}

// Shell is a shell command line that runs docker with args against the
// engine, for a hook another process runs (pbfs node --on-promote).
func (e *Engine) Shell(args ...string) string {
	return fmt.Sprintf("DOCKER_HOST=%s DOCKER_CONFIG=%s %s %s", e.Host, filepath.Join(e.Dir, "cli"), e.cli, strings.Join(args, " "))
}

// Log is what dockerd logged.
func (e *Engine) Log() string { return e.log.String() }

// stop stops the engine (its containers with it) and removes its files.
func (e *Engine) stop() {
	if e.cmd.ProcessState == nil {
		e.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { e.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			e.cmd.Process.Kill()
			<-done
			e.t.Errorf("dockerd did not stop on SIGTERM:\n%s", e.log)
		}
	}
	// What it left mounted under its directories (network namespaces,
	// container roots), deepest first.
	if t, err := mountinfo.Read(); err == nil {
		for i := len(t) - 1; i >= 0; i-- {
			if mountinfo.Within(t[i].Point, e.Dir) {
				syscall.Unmount(t[i].Point, syscall.MNT_DETACH)
			}
		}
	}
	if err := os.RemoveAll(e.Dir); err != nil {
		e.t.Logf("remove the engine's directory: %v", err)
	}
}
