// Package delayproxy is a TCP proxy that adds a fixed one-way delay each
// way, for the benchmarks' links with added latency (netem is not in every
// kernel).
package delayproxy

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Proxy is a TCP proxy that adds a fixed one-way delay in each
// direction, the way `tc qdisc ... netem delay D` would on both ends of a
// link (netem is not available in every kernel). Every chunk read from
// one side is written to the other side no earlier than delay after it was
// read, in order; there is no bandwidth limit, so a burst keeps its shape
// and only moves in time. It counts the bytes it forwards: the TCP payload
// on the wire, protocol framing and acks included.
type Proxy struct {
	ln     net.Listener
	target string
	delay  time.Duration

	up   atomic.Int64 // bytes from the client to the target
	down atomic.Int64 // bytes from the target to the client

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New listens on listen (host:port, port 0 picks one) and
// forwards every connection to target with delay added each way.
func New(listen, target string, delay time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Bytes returns the bytes forwarded so far: client to target (up) and
// target to client (down).
func (p *Proxy) Bytes() (up, down int64) { return p.up.Load(), p.down.Load() }

// Close stops accepting, cuts every open connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
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

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: try again
			continue
		}
		if !p.track(client) {
			return
		}
		p.wg.Add(1)
		go p.handle(client)
	}
}

func (p *Proxy) handle(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(client, server, &p.up) }()
	go func() { defer wg.Done(); p.pipe(server, client, &p.down) }()
	wg.Wait()
}

// chunk is one read, held until due.
type chunk struct {
	buf []byte
	due time.Time
}

var chunkPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// pipe copies src to dst, holding each chunk for the proxy's delay. A
// reader goroutine stamps chunks as they arrive, so the delay does not
// add up across chunks; the writer releases them in order at their due
// time. EOF on src half-closes dst; an error cuts both.
func (p *Proxy) pipe(src, dst net.Conn, n *atomic.Int64) {
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			bp := chunkPool.Get().(*[]byte)
			k, err := src.Read(*bp)
			if k > 0 {
				q <- chunk{buf: (*bp)[:k], due: time.Now().Add(p.delay)}
			} else {
				chunkPool.Put(bp)
			}
			if err != nil {
				return
			}
		}
	}()
	// The writer sleeps on its own thread with a timer slack of 1 ns
	// rather than the default 50 µs.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	failed := false
	for c := range q {
		if !failed {
			sleepUntil(c.due)
			k, err := dst.Write(c.buf)
			n.Add(int64(k))
			if err != nil {
				failed = true
				src.Close()
				dst.Close()
			}
		}
		b := c.buf[:cap(c.buf)]
		chunkPool.Put(&b)
	}
	if tc, ok := dst.(*net.TCPConn); ok && !failed {
		tc.CloseWrite()
	}
}

// sleepUntil sleeps until t with nanosleep(2). Go's timers sleep in
// epoll_pwait, whose timeout is whole milliseconds, so time.Sleep(500µs)
// often lasts a millisecond; a blocking nanosleep keeps the delay close to
// what was asked (pipe sets its thread's timer slack to 1 ns; the default
// is 50 µs).
func sleepUntil(t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var rem syscall.Timespec
		if err := syscall.Nanosleep(&ts, &rem); err != syscall.EINTR {
			return
		}
		ts = rem
	}
}
