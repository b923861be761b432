package dockervol

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/mountinfo"
)

// Each mounted volume is served by a `pbfs mount` process of its own, in a
// session of its own: a driver that crashes, or is restarted, leaves its
// volumes mounted and their containers writing; the next driver adopts
// them (adopt). The driver starts the process, asks it for barriers and
// status through its control socket, and stops it with SIGTERM (it seals,
// ships and unmounts, then exits).

// server is the pbfs mount process serving one volume.
type server struct {
	pid  int
	done chan struct{} // closed once the process has exited
}

// startTimeout bounds a mount's start: the engine gives Mount two minutes.
const startTimeout = 90 * time.Second

// startServer runs `pbfs mount` for the volume and waits until it serves
// the volume: mounted, and answering on its control socket. On failure
// nothing is left running or mounted, and the error carries what the
// process logged.
func (d *Driver) startServer(p paths, opts Options) (*server, error) {
	logf, err := os.OpenFile(p.log(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("start mount: %w", err)
	}
	defer logf.Close()
	from, _ := logf.Seek(0, io.SeekEnd)
	args := append([]string{"--log-level", d.cfg.LogLevel, "mount", "--journal", p.journal(), "--allow-other"}, opts.MountArgs()...)
	cmd := exec.Command(d.cfg.Exe, append(args, p.data())...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = childEnv(os.Environ())
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start mount: %w", err)
	}
	s := &server{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		if serving(p) {
			return s, nil
		}
		select {
		case <-s.done:
			clearDeadMount(p)
			return nil, fmt.Errorf("start mount: pbfs mount exited: %s", logSince(p.log(), from))
		case <-ctx.Done():
			s.stop(time.Second)
			clearDeadMount(p)
			return nil, fmt.Errorf("start mount: not served after %s: %s", startTimeout, logSince(p.log(), from))
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// childEnv is a mount's environment: the driver's (PBFS_TOKEN included),
// but no NOTIFY_SOCKET: systemd waits on the driver, not on its mounts.
func childEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			out = append(out, kv)
		}
	}
	return out
}

// serving reports whether a pbfs mount serves the volume: its data
// directory is a pbfs mount and its control socket answers.
func serving(p paths) bool {
	if !mountedAt(p.data()) {
		return false
	}
	cl, err := control.Dial(p.journal())
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = cl.Status(ctx)
	return err == nil
}

// mountedAt reports whether a pbfs mount is at dir.
func mountedAt(dir string) bool {
	t, err := mountinfo.Read()
	if err != nil {
		return false
	}
	m, ok := t.At(dir)
	return ok && m.FSType == "fuse.pbfs"
}

// clearDeadMount detaches what a killed pbfs mount left at the data
// directory, which would hide the volume's files.
func clearDeadMount(p paths) {
	for i := 0; i < 8 && mountedAt(p.data()); i++ {
		var st syscall.Statfs_t
		if err := syscall.Statfs(p.data(), &st); err != syscall.ENOTCONN {
			return // alive
		}
		syscall.Unmount(p.data(), syscall.MNT_DETACH)
	}
}

// findServer finds the pbfs mount process serving journal, from the
// process table: the driver that started it may have been another one.
func findServer(journal string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !alive(pid) {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00")
		for i, a := range args {
			if a == "--journal="+journal || (a == "--journal" && i+1 < len(args) && args[i+1] == journal) {
				return pid
			}
		}
	}
	return 0
}

// alive reports whether pid runs (a zombie, which nothing reaped yet,
// does not).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}

// adoptServer watches a process another driver started.
func adoptServer(pid int) *server {
	s := &server{pid: pid, done: make(chan struct{})}
	go func() {
		for alive(pid) {
			time.Sleep(100 * time.Millisecond)
		}
		close(s.done)
	}()
	return s
}

// errStuck: the mount did not stop on SIGTERM in time.
var errStuck = errors.New("the volume's pbfs mount did not stop")

// stop sends SIGTERM and waits up to wait for the process to seal, ship,
// unmount and exit; past that it kills it (the journal then holds what
// the mount took, and the next mount resyncs the backups) and says so.
func (s *server) stop(wait time.Duration) error {
	syscall.Kill(s.pid, syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(wait):
	}
	syscall.Kill(s.pid, syscall.SIGKILL)
	<-s.done
	return fmt.Errorf("%w within %s of SIGTERM: killed", errStuck, wait)
}

// logSince returns the last lines of what the log at path holds past
// offset from, for an error.
func logSince(path string, from int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log)"
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, from, 1<<20))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "(nothing logged; see " + path + ")"
	}
	return strings.Join(lines, "; ")
}
