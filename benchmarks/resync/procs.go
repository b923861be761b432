package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/control"
)

// The process helpers live in benchmarks/internal/benchproc.
type proc = benchproc.Proc

var (
	startProc     = benchproc.Start
	freeAddr      = benchproc.FreeAddr
	waitListening = benchproc.WaitListening
	mounted       = benchproc.Mounted
	mountsUnder   = benchproc.MountsUnder
)

// waitMounted waits for the primary's mount and control socket.
func waitMounted(ctx context.Context, p *proc, vol, jdir string) (*control.Client, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		if p.Exited() {
			return nil, fmt.Errorf("%s exited: %v\n%s", p.Name, p.Err, p.LogTail(20))
		}
		if mounted(vol) {
			if cl, err := control.Dial(jdir); err == nil {
				if _, err := cl.Status(ctx); err == nil {
					return cl, nil
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%s did not mount %s:\n%s", p.Name, vol, p.LogTail(20))
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
