package proxy

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/ratelog"
)

// shedResponse is what a client accepted only to be turned away gets.
const shedResponse = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 46\r\n\r\npbfs proxy: too many connections, retry later\n"

// listener bounds client connections and keeps accepting when the
// process runs out of file descriptors.
//
// Past maxConns open client connections it cuts off the one that
// achieves least to admit a new client (conns.go), or, with none to cut
// off, answers the new client 503 at once: descriptors are kept for the
// upstream pool, which every request needs, rather than spent on clients
// it could not serve. If accept(2)
// still fails with EMFILE or ENFILE (other descriptors, or the whole
// system, ran out), the client waits in the kernel's backlog; instead of
// spinning or giving up, the listener backs off, and frees a reserved
// descriptor to accept one waiting client and answer it 503, so clients
// learn they were shed instead of timing out.
type listener struct {
	net.Listener
	log      *logLimiter
	m        *metrics
	maxConns int64
	open     atomic.Int64
	shedding chan struct{} // bounds the goroutines answering shed clients
	evicting atomic.Int64  // connections cut off and not closed yet

	connsMu sync.Mutex
	conns   map[*countedClient]struct{}

	mu      sync.Mutex
	reserve *os.File
}

func newListener(ln net.Listener, maxConns int, log *slog.Logger, m *metrics) *listener {
	l := &listener{Listener: ln, log: newLogLimiter(log), m: m, maxConns: int64(maxConns), shedding: make(chan struct{}, 48),
		conns: map[*countedClient]struct{}{}}
	l.reserve, _ = os.Open(os.DevNull)
	return l
}

// maxClientConns is the client-connection bound for a descriptor limit:
// what is left after the upstream pool and a margin for everything else
// (48 connections being turned away, 16 being cut off, the plugin's
// gRPC, metrics, spool files, logs).
func maxClientConns(configured, pool int) int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 1<<30 {
		byFds := int(lim.Cur) - pool - 96
		if configured <= 0 || byFds < configured {
			return max(byFds, 1)
		}
	}
	if configured <= 0 {
		return 10000
	}
	return configured
}

// turnAway answers c 503 and closes it, off the accept loop. When as
// many clients as the shedding budget allows are being turned away
// already, it waits for one of them (a few milliseconds): the others wait
// in the kernel's backlog meanwhile, rather than being reset.
func (l *listener) turnAway(c net.Conn, reason string) {
	l.m.shed.WithLabelValues(reason).Inc()
	l.log.warn("shed-"+reason, "client connection shed", "reason", reason, "open", l.open.Load())
	l.shedding <- struct{}{}
	go func() {
		defer func() { <-l.shedding }()
		answer503(c, shedWait)
	}()
}

// answer503 reads the client's request, answers 503 and closes. Reading
// first matters: a client that has not sent its request yet takes an
// early answer for an unsolicited response and fails, and closing with
// unread bytes resets the connection, losing the answer (the client sees
// EOF, not a 503). So it waits up to wait for the request, a client on a
// busy machine can take a while to send it, and after the answer drains
// what the client still sends until it closes, for at most a second.
func answer503(c net.Conn, wait time.Duration) {
	c.SetDeadline(time.Now().Add(wait))
	var buf [4096]byte
	c.Read(buf[:])
	c.SetDeadline(time.Now().Add(time.Second))
	c.Write([]byte(shedResponse))
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	for {
		if _, err := c.Read(buf[:]); err != nil {
			break
		}
	}
	c.Close()
}

// shedWait is how long a turned-away client has to send its request.
// Those goroutines are bounded (listener.shedding), and one returns as
// soon as its client's request arrives; only a client that connects and
// sends nothing keeps one for the whole wait.
const shedWait = time.Second

func (l *listener) Accept() (net.Conn, error) {
	backoff := 5 * time.Millisecond
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			if l.open.Load() >= l.maxConns && !l.makeRoom() {
				l.turnAway(c, "too-many-connections")
				continue
			}
			return l.admit(c), nil
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, err
		}
		reason := errReason(err)
		l.m.acceptErrors.WithLabelValues(reason).Inc()
		l.log.warn("accept-"+reason, "accept failed; backing off", "err", err, "backoff", backoff)
		if (reason == "emfile" || reason == "enfile") && l.shedOne() {
			// A client was waiting and got its 503: drain the backlog
			// quickly rather than at the backoff's pace.
			time.Sleep(time.Millisecond)
			continue
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// shedOne spends the reserved descriptor on one waiting client: accept,
// answer 503, close, and take the descriptor back. It reports whether a
// client was shed.
func (l *listener) shedOne() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reserve == nil {
		l.reserve, _ = os.Open(os.DevNull)
		return false
	}
	shed := false
	l.reserve.Close()
	l.reserve = nil
	if tl, ok := l.Listener.(*net.TCPListener); ok {
		tl.SetDeadline(time.Now().Add(10 * time.Millisecond))
		c, err := tl.Accept()
		tl.SetDeadline(time.Time{})
		if err == nil {
			// On the accept loop: a short wait, the backlog is full.
			answer503(c, 50*time.Millisecond)
			l.m.shed.WithLabelValues("no-fds").Inc()
			shed = true
		}
	}
	l.reserve, _ = os.Open(os.DevNull)
	return shed
}

func (l *listener) Close() error {
	l.mu.Lock()
	if l.reserve != nil {
		l.reserve.Close()
		l.reserve = nil
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

// errReason names an accept or dial failure for metrics and logs.
func errReason(err error) string {
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno) && errno == syscall.EMFILE:
		return "emfile"
	case errors.As(err, &errno) && errno == syscall.ENFILE:
		return "enfile"
	case errors.As(err, &errno) && errno == syscall.EADDRNOTAVAIL:
		return "no-ports"
	case errors.As(err, &errno) && errno == syscall.ECONNREFUSED:
		return "refused"
	case errors.As(err, &errno) && (errno == syscall.ENOBUFS || errno == syscall.ENOMEM):
		return "no-memory"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "other"
}

// resourceExhausted reports failures that mean "this machine is out of
// something", which the proxy answers 503 (shed) rather than 502.
func resourceExhausted(reason string) bool {
	switch reason {
	case "emfile", "enfile", "no-ports", "no-memory":
		return true
	}
	return false
}

// logLimiter logs each kind of repeated failure at most once a second,
// with how many it left out.
type logLimiter struct {
	log *slog.Logger
	lim *ratelog.Limiter
}

func newLogLimiter(log *slog.Logger) *logLimiter {
	return &logLimiter{log: log, lim: ratelog.New(time.Second)}
}

func (l *logLimiter) warn(kind, msg string, args ...any) {
	if ok, skipped := l.lim.Allow(kind, time.Now()); ok {
		l.log.Warn(msg, append(args, "similar_suppressed", skipped)...)
	}
}
