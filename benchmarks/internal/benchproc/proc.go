// Package benchproc starts, watches and stops the pbfs processes the
// benchmark programs run, each logging to its own file.
package benchproc

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is a process the benchmark started, logging to a file.
type Proc struct {
	Name    string
	Cmd     *exec.Cmd
	LogPath string
	done    chan struct{}
	Err     error // from Wait, once Exited
}

// Start runs argv with its output in logPath, in its own process group.
func Start(name, logPath string, env []string, argv ...string) (*Proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	// Its own process group, so a Ctrl-C in the terminal reaches only the
	// benchmark, which then stops everything in order; SIGTERM if the
	// benchmark dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	go func() {
		p.Err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGINT and waits; SIGTERM follows after half the timeout (a
// process started from a background job of a non-interactive shell
// inherits SIGINT ignored), and a process that does not stop in time is
// killed, and that is an error.
func (p *Proc) Stop(timeout time.Duration) error {
	if p == nil {
		return nil
	}
	if !p.Exited() {
		p.Cmd.Process.Signal(syscall.SIGINT)
	}
	term := time.After(timeout / 2)
	kill := time.After(timeout)
	for {
		select {
		case <-p.done:
			if p.Err != nil {
				return fmt.Errorf("%s exited: %v (log: %s)", p.Name, p.Err, p.LogPath)
			}
			return nil
		case <-term:
			p.Cmd.Process.Signal(syscall.SIGTERM)
		case <-kill:
			p.Cmd.Process.Kill()
			<-p.done
			return fmt.Errorf("%s did not stop within %s after SIGINT and SIGTERM; killed (log: %s)", p.Name, timeout, p.LogPath)
		}
	}
}

// Log returns the process's whole log.
func (p *Proc) Log() string {
	data, _ := os.ReadFile(p.LogPath)
	return string(data)
}

// LogTail returns the last lines of the process's log.
func (p *Proc) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Complaints returns the log lines above INFO.
func (p *Proc) Complaints() []string {
	var out []string
	for _, l := range strings.Split(p.Log(), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "panic") {
			out = append(out, p.Name+": "+l)
		}
	}
	return out
}

// LogEvents returns the parsed log lines whose message is msg, in order.
func (p *Proc) LogEvents(msg string) []map[string]string {
	var out []map[string]string
	for _, l := range strings.Split(p.Log(), "\n") {
		kv := ParseLogLine(l)
		if kv["msg"] == msg {
			out = append(out, kv)
		}
	}
	return out
}

// ParseLogLine splits a slog text line into its keys and values.
func ParseLogLine(l string) map[string]string {
	kv := map[string]string{}
	for len(l) > 0 {
		l = strings.TrimLeft(l, " ")
		eq := strings.IndexByte(l, '=')
		if eq <= 0 {
			break
		}
		k := l[:eq]
		l = l[eq+1:]
		if strings.HasPrefix(l, `"`) {
			// A quoted value: find its closing quote.
			end := 1
			for end < len(l) && (l[end] != '"' || l[end-1] == '\\') {
				end++
			}
			v, err := strconv.Unquote(l[:min(end+1, len(l))])
			if err != nil {
				v = l[1:end]
			}
			kv[k] = v
			l = l[min(end+1, len(l)):]
			continue
		}
		sp := strings.IndexByte(l, ' ')
		if sp < 0 {
			sp = len(l)
		}
		kv[k] = l[:sp]
		l = l[sp:]
	}
	return kv
}

// WaitEvent waits until the log has more than n lines with message msg
// and returns the newest.
func (p *Proc) WaitEvent(ctx context.Context, msg string, n int, timeout time.Duration) (map[string]string, error) {
	deadline := time.Now().Add(timeout)
	for {
		if ev := p.LogEvents(msg); len(ev) > n {
			return ev[len(ev)-1], nil
		}
		if p.Exited() {
			return nil, fmt.Errorf("%s exited while waiting for %q: %v\n%s", p.Name, msg, p.Err, p.LogTail(20))
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: no %q within %s:\n%s", p.Name, msg, timeout, p.LogTail(20))
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreeAddr returns a loopback address nobody listens on (yet).
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// WaitListening waits until p accepts connections on addr.
func WaitListening(ctx context.Context, p *Proc, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("%s exited: %v\n%s", p.Name, p.Err, p.LogTail(20))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not listen on %s:\n%s", p.Name, addr, p.LogTail(20))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Mounted reports whether a pbfs mount is at dir.
func Mounted(dir string) bool {
	data, _ := os.ReadFile("/proc/mounts")
	return strings.Contains(string(data), " "+dir+" fuse.pbfs ")
}

// MountsUnder lists the FUSE mounts below dir.
func MountsUnder(dir string) []string {
	data, _ := os.ReadFile("/proc/mounts")
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && strings.HasPrefix(f[2], "fuse") && strings.HasPrefix(f[1], dir+"/") {
			out = append(out, f[1])
		}
	}
	return out
}
