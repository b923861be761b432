package wire

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Listener sorts the connections to a backup's port by their first
// bytes: raw streams (Magic) go to raw, in a goroutine of their own;
// everything else is handed to gRPC, which reads this listener, with the
// bytes read to sort it put back in front. With raw nil, everything goes
// to gRPC unread. Every connection passes admit first, which may close
// it (false) or hand back one it tracks.
type Listener struct {
	ln     net.Listener
	admit  func(net.Conn) (net.Conn, bool)
	raw    func(net.Conn)
	failed func(error)   // an accept failed
	toGRPC chan accepted // to gRPC
	done   chan struct{}
	once   sync.Once
}

type accepted struct {
	c   net.Conn
	err error
}

// NewListener sorts the connections ln accepts; failed is told of each
// accept that failed.
func NewListener(ln net.Listener, admit func(net.Conn) (net.Conn, bool), raw func(net.Conn), failed func(error)) *Listener {
	l := &Listener{ln: ln, admit: admit, raw: raw, failed: failed, toGRPC: make(chan accepted), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

// acceptLoop accepts until the listener closes. Every connection gets
// the keepalive and user timeout a dialed raw stream has: gRPC sets the
// user timeout only on a *net.TCPConn, which a prefixConn is not. An
// accept error goes to gRPC's Accept, which backs off a temporary one
// (EMFILE, ENFILE: out of descriptors) before asking again and returns
// on any other; the loop waits for it to be taken, so a listener out of
// descriptors is not spun on.
func (l *Listener) acceptLoop() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			l.failed(err)
			select {
			case l.toGRPC <- accepted{err: err}:
			case <-l.done:
				return
			}
			if !isTemporary(err) {
				return
			}
			continue
		}
		tuneAccepted(c)
		if c, ok := l.admit(c); ok {
			go l.sort(c)
		}
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// sort reads as many bytes as the magic has. A peer that sends none
// within rawHandshake, or closes first, is dropped: gRPC's clients and TLS
// both speak first.
func (l *Listener) sort(c net.Conn) {
	if l.raw == nil {
		l.handToGRPC(c)
		return
	}
	c.SetReadDeadline(time.Now().Add(rawHandshake))
	var head [len(Magic)]byte
	n, err := io.ReadFull(c, head[:])
	c.SetReadDeadline(time.Time{})
	switch {
	case err == nil && string(head[:]) == Magic:
		l.raw(c)
		return
	case n == 0:
		c.Close()
		return
	}
	l.handToGRPC(&prefixConn{Conn: c, head: head[:n]})
}

// handToGRPC hands c to gRPC's Accept, or closes it once the listener is.
func (l *Listener) handToGRPC(c net.Conn) {
	select {
	case l.toGRPC <- accepted{c: c}:
	case <-l.done:
		c.Close()
	}
}

// Accept returns the next connection for gRPC.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case a := <-l.toGRPC:
		return a.c, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting. Raw streams already served are the backup's to
// close.
func (l *Listener) Close() error {
	err := net.ErrClosed
	l.once.Do(func() {
		close(l.done)
		err = l.ln.Close()
	})
	return err
}

func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// prefixConn reads head before the rest of Conn.
type prefixConn struct {
	net.Conn
	head []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
