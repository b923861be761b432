package proxy

import (
	"net"
	"sync"
	"time"
)

// Making room for a client when every connection is taken (max-conns).
// Turned away with a 503, a client that sends its request at once lost
// its place to clients that hold a connection and do nothing with it: at
// 256 descriptors, 144 clients trickling request bodies kept every other
// client out for as long as they trickled. Instead the newcomer takes the
// place of the connection that achieves least, once it has had
// evictAfter to show it: one waiting for a request (idle keep-alive, or
// a header still coming), closed; else the request body arriving
// slowest, answered 408. Only with neither is the newcomer turned away.

// phase is where a client connection is, for choosing one to cut off.
type phase uint8

const (
	phaseWaiting phase = iota // for a request or the rest of its header (new or idle)
	phaseBusy                 // a request in the proxy's hands, or a tunnel
	phaseBody                 // its request body arriving
)

const (
	// evictAfter is how long a connection is in its phase before it
	// may be cut off.
	evictAfter = time.Second
	// maxEvicting bounds the connections cut off and not closed yet:
	// each let a newcomer in past max-conns.
	maxEvicting = 16
)

// countedClient is an admitted client connection: it gives its slot back
// when the server closes it, and says what it is doing.
type countedClient struct {
	net.Conn
	l    *listener
	once sync.Once

	mu    sync.Mutex
	phase phase
	since time.Time
	body  *bodyReader // while phaseBody
	cut   bool        // cut off: its slot went to a newcomer
}

func (c *countedClient) Close() error {
	c.once.Do(func() { c.l.forget(c) })
	return c.Conn.Close()
}

func (c *countedClient) setPhase(p phase, body *bodyReader) {
	now := time.Now()
	c.mu.Lock()
	c.phase, c.body, c.since = p, body, now
	c.mu.Unlock()
}

// stall says how little the connection achieves: the bytes a second its
// body arrives at (0 while it waits), and how long it has been at it; ok
// is false for one that may not be cut off.
func (c *countedClient) stall(now time.Time) (rate float64, age time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	age = now.Sub(c.since)
	switch {
	case c.cut || age < evictAfter:
		return 0, 0, false
	case c.phase == phaseWaiting:
		return 0, age, true
	case c.phase == phaseBody:
		return c.body.arrivalRate(now), age, true
	}
	return 0, 0, false
}

// cutOff ends the connection to make room: one waiting is closed, one
// whose body arrives is answered 408 by its handler. It reports false if
// the connection could no longer be cut off.
func (c *countedClient) cutOff() (reason string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.cut:
		return "", false
	case c.phase == phaseWaiting:
		c.cut = true
		c.Conn.Close() // the server's read fails, and it closes c
		return "waiting", true
	case c.phase == phaseBody && c.body.evict():
		c.cut = true
		return "slow-body", true
	}
	return "", false
}

// admit counts a connection in.
func (l *listener) admit(nc net.Conn) *countedClient {
	l.open.Add(1)
	c := &countedClient{Conn: nc, l: l, since: time.Now()}
	l.connsMu.Lock()
	l.conns[c] = struct{}{}
	l.connsMu.Unlock()
	return c
}

// forget counts a closed connection out.
func (l *listener) forget(c *countedClient) {
	c.mu.Lock()
	cut := c.cut
	c.mu.Unlock()
	if cut {
		l.evicting.Add(-1)
	}
	l.connsMu.Lock()
	delete(l.conns, c)
	l.connsMu.Unlock()
	l.open.Add(-1)
}

// makeRoom cuts off the connection that achieves least, if one may be,
// and reports whether it did.
func (l *listener) makeRoom() bool {
	if l.evicting.Load() >= maxEvicting {
		return false
	}
	now := time.Now()
	var victim *countedClient
	var vRate float64
	var vAge time.Duration
	l.connsMu.Lock()
	for c := range l.conns {
		rate, age, ok := c.stall(now)
		if ok && (victim == nil || rate < vRate || rate == vRate && age > vAge) {
			victim, vRate, vAge = c, rate, age
		}
	}
	l.connsMu.Unlock()
	if victim == nil {
		return false
	}
	l.evicting.Add(1) // before the victim can close and count itself out
	reason, ok := victim.cutOff()
	if !ok {
		l.evicting.Add(-1)
		return false
	}
	l.m.evictions.WithLabelValues(reason).Inc()
	l.log.warn("evict-"+reason, "every client connection is taken: cut one off to admit another",
		"reason", reason, "open", l.open.Load(), "bytes_per_second", int64(vRate), "for", vAge.Round(time.Millisecond))
	return true
}
