package fstest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Relay forwards TCP connections to a server until it is cut: a network
// partition between one process and that server (the process keeps
// running, and its own clock says nothing happened). Cut closes every
// connection and closes new ones at once; Mend lets them through again.
type Relay struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// StartRelay relays a loopback port to target until the test ends.
func StartRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	r := &Relay{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go r.serve()
	t.Cleanup(func() {
		ln.Close()
		r.Cut()
	})
	return r
}

// Addr is where the relay listens.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Cut drops every connection through the relay, and every new one.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = true
	for c := range r.conns {
		c.Close()
	}
	clear(r.conns)
}

// Mend lets connections through again.
func (r *Relay) Mend() {
	r.mu.Lock()
	r.cut = false
	r.mu.Unlock()
}

func (r *Relay) serve() {
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		go r.relay(in)
	}
}

// relay copies both ways between in and a new connection to the target.
func (r *Relay) relay(in net.Conn) {
	out, err := net.Dial("tcp", r.target)
	if err != nil {
		in.Close()
		return
	}
	r.mu.Lock()
	if r.cut {
		r.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	r.conns[in], r.conns[out] = struct{}{}, struct{}{}
	r.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	in.Close()
	out.Close()
	<-done
	r.mu.Lock()
	delete(r.conns, in)
	delete(r.conns, out)
	r.mu.Unlock()
}
