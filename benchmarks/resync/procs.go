package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/control"
)

// proc is a process the benchmark started, logging to a file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // from Wait, once done is closed
}

func startProc(name, logPath string, env []string, argv ...string) (*proc, error) {
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
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGINT and waits; SIGTERM follows after half the timeout (a
// process started from a background job of a non-interactive shell
// inherits SIGINT ignored), and a process that does not stop in time is
// killed, and that is an error.
func (p *proc) stop(timeout time.Duration) error {
	if p == nil {
		return nil
	}
	if !p.exited() {
		p.cmd.Process.Signal(syscall.SIGINT)
	}
	term := time.After(timeout / 2)
	kill := time.After(timeout)
	for {
		select {
		case <-p.done:
			if p.err != nil {
				return fmt.Errorf("%s exited: %v (log: %s)", p.name, p.err, p.logPath)
			}
			return nil
		case <-term:
			p.cmd.Process.Signal(syscall.SIGTERM)
		case <-kill:
			p.cmd.Process.Kill()
			<-p.done
			return fmt.Errorf("%s did not stop within %s after SIGINT and SIGTERM; killed (log: %s)", p.name, timeout, p.logPath)
		}
	}
}

func (p *proc) log() string {
	data, _ := os.ReadFile(p.logPath)
	return string(data)
}

// logTail returns the last lines of the process's log.
func (p *proc) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(p.log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// complaints returns the log lines above INFO.
func (p *proc) complaints() []string {
	var out []string
	for _, l := range strings.Split(p.log(), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "panic") {
			out = append(out, p.name+": "+l)
		}
	}
	return out
}

// logEvents returns the parsed log lines whose message is msg, in order.
func (p *proc) logEvents(msg string) []map[string]string {
	var out []map[string]string
	for _, l := range strings.Split(p.log(), "\n") {
		kv := parseLogLine(l)
		if kv["msg"] == msg {
			out = append(out, kv)
		}
	}
	return out
}

// parseLogLine splits a slog text line into its keys and values.
func parseLogLine(l string) map[string]string {
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

// waitEvent waits until the log has more than n lines with message msg
// and returns the newest.
func (p *proc) waitEvent(ctx context.Context, msg string, n int, timeout time.Duration) (map[string]string, error) {
	deadline := time.Now().Add(timeout)
	for {
		if ev := p.logEvents(msg); len(ev) > n {
			return ev[len(ev)-1], nil
		}
		if p.exited() {
			return nil, fmt.Errorf("%s exited while waiting for %q: %v\n%s", p.name, msg, p.err, p.logTail(20))
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: no %q within %s:\n%s", p.name, msg, timeout, p.logTail(20))
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitListening(ctx context.Context, p *proc, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.err, p.logTail(20))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not listen on %s:\n%s", p.name, addr, p.logTail(20))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mounted reports whether a pbfs mount is at dir.
func mounted(dir string) bool {
	data, _ := os.ReadFile("/proc/mounts")
	return strings.Contains(string(data), " "+dir+" fuse.pbfs ")
}

func mountsUnder(dir string) []string {
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

// waitMounted waits for the primary's mount and control socket.
func waitMounted(ctx context.Context, p *proc, vol, jdir string) (*control.Client, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		if p.exited() {
			return nil, fmt.Errorf("%s exited: %v\n%s", p.name, p.err, p.logTail(20))
		}
		if mounted(vol) {
			if cl, err := control.Dial(jdir); err == nil {
				if _, err := cl.Status(ctx); err == nil {
					return cl, nil
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%s did not mount %s:\n%s", p.name, vol, p.logTail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// barrierApplied takes a barrier and waits until every backup has applied
// it, so the backups' volumes can be compared with the primary's.
func barrierApplied(ctx context.Context, cl *control.Client, timeout time.Duration) (uint64, error) {
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	seq, err := cl.Barrier(bctx)
	if err != nil {
		return 0, fmt.Errorf("barrier: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		st, err := cl.Status(ctx)
		if err != nil {
			return seq, err
		}
		done := 0
		for _, b := range st.Backups {
			if b.AppliedSeq >= seq {
				done++
			}
		}
		if done == len(st.Backups) {
			return seq, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return seq, fmt.Errorf("backups did not apply seq %d: %+v", seq, st.Backups)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metrics maps a Prometheus series (name{labels}) to its value.
type metrics map[string]float64

func scrape(ctx context.Context, cl *control.Client) (metrics, error) {
	text, err := cl.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	m := metrics{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m, nil
}

// sum adds the series of metric name whose labels contain label.
func (m metrics) sum(name, label string) float64 {
	var s float64
	for k, v := range m {
		if (k == name || strings.HasPrefix(k, name+"{")) && strings.Contains(k, label) {
			s += v
		}
	}
	return s
}

// CountProxy forwards TCP connections to a target and counts the bytes
// each way: the TCP payload, so gRPC and HTTP/2 framing are included.
type CountProxy struct {
	ln     net.Listener
	target string
	up     atomic.Int64 // client (primary) to target (backup)
	down   atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewCountProxy listens on a free loopback port.
func NewCountProxy(target string) (*CountProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &CountProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the address clients connect to.
func (p *CountProxy) Addr() string { return p.ln.Addr().String() }

// Bytes returns the bytes forwarded so far each way.
func (p *CountProxy) Bytes() (up, down int64) { return p.up.Load(), p.down.Load() }

// Close cuts every connection and waits for the proxy's goroutines.
func (p *CountProxy) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *CountProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *CountProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *CountProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			t, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				return
			}
			if !p.track(c, t) {
				return
			}
			defer p.untrack(c, t)
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn, n *atomic.Int64) {
				io.Copy(countWriter{dst, n}, src)
				done <- struct{}{}
			}
			go pipe(t, c, &p.up)
			go pipe(c, t, &p.down)
			<-done // either side closing ends the connection
		}()
	}
}

type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// errs joins the non-nil errors.
func errs(list ...error) error { return errors.Join(list...) }
