package proxy

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// shedResponse is what a client accepted only to be turned away gets.
const shedResponse = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 50\r\n\r\npbfs proxy: out of file descriptors, retry later\n"

// listener keeps accepting when the process runs out of file
// descriptors. accept(2) then fails with EMFILE or ENFILE and the client
// waits in the kernel's backlog; instead of spinning or giving up, the
// listener backs off, and frees a reserved descriptor to accept one
// waiting client and answer it 503 at once, so clients learn they were
// shed instead of timing out.
type listener struct {
	net.Listener
	log *logLimiter
	m   *metrics

	mu      sync.Mutex
	reserve *os.File
}

func newListener(ln net.Listener, log *slog.Logger, m *metrics) *listener {
	l := &listener{Listener: ln, log: newLogLimiter(log), m: m}
	l.reserve, _ = os.Open(os.DevNull)
	return l
}

func (l *listener) Accept() (net.Conn, error) {
	backoff := 5 * time.Millisecond
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			return c, nil
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
			// Read the request first: closing with unread bytes resets the
			// connection, and the client would see an error, not the 503.
			c.SetDeadline(time.Now().Add(50 * time.Millisecond))
			var buf [4096]byte
			c.Read(buf[:])
			c.Write([]byte(shedResponse))
			c.Close()
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
	log  *slog.Logger
	mu   sync.Mutex
	last map[string]time.Time
	skip map[string]int
}

func newLogLimiter(log *slog.Logger) *logLimiter {
	return &logLimiter{log: log, last: map[string]time.Time{}, skip: map[string]int{}}
}

func (l *logLimiter) warn(kind, msg string, args ...any) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.last[kind]) < time.Second {
		l.skip[kind]++
		l.mu.Unlock()
		return
	}
	skipped := l.skip[kind]
	l.last[kind], l.skip[kind] = now, 0
	l.mu.Unlock()
	l.log.Warn(msg, append(args, "similar_suppressed", skipped)...)
}
