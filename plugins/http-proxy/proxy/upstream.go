package proxy

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// newTransport is the upstream side: at most pool connections, all kept
// alive between requests. A request never opens a connection of its own
// while the pool has an idle one, and the proxy always asks the upstream
// for keep-alive; an upstream that closes anyway (it answered
// "Connection: close") is redialed, still within the bound.
//
// The transport counts a connection gone just before it closes it, and may
// dial its replacement in between; open holds a dial until the old socket
// is really closed, so the bound holds for sockets too.
func newTransport(pool int, headerTimeout time.Duration, m *metrics, log *logLimiter) *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	open := make(chan struct{}, pool)
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			select {
			case open <- struct{}{}:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				<-open
				reason := errReason(err)
				m.dialErrors.WithLabelValues(reason).Inc()
				log.warn("dial-"+reason, "dial upstream failed", "addr", addr, "err", err)
				return nil, &dialError{reason: reason, err: err}
			}
			m.dials.Inc()
			m.upstreamConns.Inc()
			return &countedConn{Conn: c, m: m, open: open}, nil
		},
		// No MaxConnsPerHost: open bounds the sockets, and a tunnel
		// (leave) must be able to go past it.
		MaxIdleConnsPerHost:   pool,
		MaxIdleConns:          pool,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: headerTimeout,
		DisableCompression:    true, // pass bodies through as the upstream sent them
		ForceAttemptHTTP2:     false,
	}
}

// dialError carries why a dial failed.
type dialError struct {
	reason string
	err    error
}

func (e *dialError) Error() string { return "dial upstream: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// countedConn keeps the open-upstream-connections gauge.
type countedConn struct {
	net.Conn
	m    *metrics
	open chan struct{}
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.leave()
	return err
}

// leave takes the connection out of the bound on open connections, for
// good: at its close, or when it became a tunnel (101 Switching
// Protocols), which may stay open for hours and is no request of the
// pool's. As many tunnels as the pool holds kept every request out.
func (c *countedConn) leave() {
	c.once.Do(func() {
		c.m.upstreamConns.Dec()
		<-c.open
	})
}

// slots bounds the requests admitted at once (max-inflight); one past
// it is shed at once.
type slots chan struct{}

func (s slots) tryAcquire() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s slots) release() { <-s }
