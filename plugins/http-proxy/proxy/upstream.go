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
func newTransport(pool int, headerTimeout time.Duration, m *metrics, log *logLimiter) *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				reason := errReason(err)
				m.dialErrors.WithLabelValues(reason).Inc()
				log.warn("dial-"+reason, "dial upstream failed", "addr", addr, "err", err)
				return nil, &dialError{reason: reason, err: err}
			}
			m.dials.Inc()
			m.upstreamConns.Inc()
			return &countedConn{Conn: c, m: m}, nil
		},
		MaxConnsPerHost:       pool,
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
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.m.upstreamConns.Dec() })
	return c.Conn.Close()
}

// slots bounds the requests using upstream connections: a request waits
// for a slot at most the queue timeout, then gets a 503.
type slots chan struct{}

func (s slots) acquire(ctx context.Context, wait time.Duration) bool {
	select {
	case s <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (s slots) release() { <-s }
