package proxy

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// upstreamGate holds requests while the service refuses connections.
// After a failover the new primary's proxy serves before its
// --on-promote hook has started the service, and a restarting service is
// away for a moment too: those requests were answered 502 "connection
// refused". A refused dial never reached the service, so the request may
// wait and be sent once it listens; one prober dials meanwhile, not every
// waiting request.
type upstreamGate struct {
	addr string // host:port
	log  *slog.Logger
	m    *metrics
	stop chan struct{} // closed when the proxy stops
	down atomic.Bool

	mu     sync.Mutex
	up     chan struct{} // closed once the service accepts again
	downAt time.Time
	upAt   time.Time // when it last came back
}

func newGate(u *url.URL, log *slog.Logger, m *metrics) *upstreamGate {
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &upstreamGate{addr: addr, log: log, m: m, stop: make(chan struct{})}
}

// markDown notes a refused dial; the first of a spell starts the prober.
func (g *upstreamGate) markDown(wait time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down.Load() {
		return
	}
	g.up, g.downAt = make(chan struct{}), time.Now()
	g.down.Store(true)
	g.m.upstreamDown.Set(1)
	g.log.Warn("the service refuses connections: requests wait for it (upstream-wait), then get 503",
		"upstream", g.addr, "upstream_wait", wait)
	go g.probe(g.up)
}

// wait returns true at once unless the service is down, else once it
// accepts again; false once until passes, ctx ends or the proxy stops.
func (g *upstreamGate) wait(ctx context.Context, until time.Time) bool {
	if !g.down.Load() {
		return true
	}
	g.mu.Lock()
	up := g.up
	g.mu.Unlock()
	g.m.upstreamWaiting.Inc()
	defer g.m.upstreamWaiting.Dec()
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-up:
		return true
	case <-t.C:
	case <-ctx.Done():
	case <-g.stop:
	}
	return false
}

// downSince reports whether the service was down at some time since t.
func (g *upstreamGate) downSince(t time.Time) bool {
	if g.down.Load() {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.upAt.After(t)
}

// probe dials until the service accepts a connection (closed at once),
// then lets the waiting requests go.
func (g *upstreamGate) probe(up chan struct{}) {
	d := net.Dialer{Timeout: time.Second}
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		select {
		case <-g.stop:
			return
		case <-time.After(wait):
		}
		if c, err := d.Dial("tcp", g.addr); err == nil {
			c.Close()
			break
		}
	}
	g.mu.Lock()
	g.upAt = time.Now()
	downFor := g.upAt.Sub(g.downAt)
	g.down.Store(false)
	close(up)
	g.mu.Unlock()
	g.m.upstreamDown.Set(0)
	g.log.Info("the service accepts connections again: the waiting requests go to it", "upstream", g.addr,
		"down_for", downFor.Round(time.Millisecond))
}

// close lets every waiting request go with a 503 and ends the prober.
func (g *upstreamGate) close() { close(g.stop) }
