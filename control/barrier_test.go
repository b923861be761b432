package control

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/manifest"
)

// fakeBackend answers barriers with increasing seqs, or an error, or
// holds them until their context ends.
type fakeBackend struct {
	seq   atomic.Uint64
	fail  atomic.Pointer[error]
	block atomic.Bool
}

func (f *fakeBackend) Barrier(ctx context.Context) (uint64, error) {
	if f.block.Load() {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	if e := f.fail.Load(); e != nil {
		return 0, *e
	}
	return f.seq.Add(1), nil
}
func (f *fakeBackend) Resync([]string) error                         { return nil }
func (f *fakeBackend) Status() Status                                { return Status{} }
func (f *fakeBackend) Get(uint64) ([]byte, error)                    { return nil, errors.New("none") }
func (f *fakeBackend) Scan(uint64, func(uint64, []byte) error) error { return nil }
func (f *fakeBackend) Manifest(context.Context, []string, func(manifest.Entry) error) error {
	return nil
}
func (f *fakeBackend) Compare(context.Context, []string) (Comparison, error) {
	return Comparison{}, nil
}

// countingListener counts the connections accepted and can cut them all.
type countingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *countingListener) accepted() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.conns) }

func (l *countingListener) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}

func serveFake(t *testing.T) (*fakeBackend, *countingListener, *Client) {
	t.Helper()
	dir := t.TempDir()
	ln, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	b := &fakeBackend{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Serve(ctx, cl, b, nil, slog.New(slog.DiscardHandler)); close(done) }()
	c, err := Dial(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); cancel(); <-done })
	return b, cl, c
}

func TestBarrierKeepsItsConnection(t *testing.T) {
	_, ln, c := serveFake(t)
	for want := uint64(1); want <= 20; want++ {
		seq, err := c.Barrier(context.Background())
		if err != nil || seq != want {
			t.Fatalf("barrier %d: %d, %v", want, seq, err)
		}
	}
	if n := ln.accepted(); n != 1 {
		t.Errorf("20 barriers in a row took %d connections, want 1", n)
	}
	// The server closing kept connections (its idle timeout, a restart)
	// costs a new connection, not a failed barrier.
	ln.cut()
	if seq, err := c.Barrier(context.Background()); err != nil || seq != 21 {
		t.Fatalf("barrier after the server closed the kept connection: %d, %v", seq, err)
	}
}

func TestBarrierConcurrentAndErrors(t *testing.T) {
	b, _, c := serveFake(t)
	var wg sync.WaitGroup
	seqs := make(chan uint64, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq, err := c.Barrier(context.Background())
			if err != nil {
				t.Error(err)
			}
			seqs <- seq
		}()
	}
	wg.Wait()
	close(seqs)
	seen := map[uint64]bool{}
	for s := range seqs {
		if s == 0 || seen[s] {
			t.Fatalf("seq %d twice or zero", s)
		}
		seen[s] = true
	}

	e := errors.New("backup b1 is down")
	b.fail.Store(&e)
	if _, err := c.Barrier(context.Background()); err == nil || err.Error() != "barrier: backup b1 is down" {
		t.Fatalf("a failed barrier: %v", err)
	}
	b.fail.Store(nil)

	b.block.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	if _, err := c.Barrier(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled barrier: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a cancelled barrier returned after %v", d)
	}
	b.block.Store(false)
	if _, err := c.Barrier(context.Background()); err != nil {
		t.Fatalf("the barrier after a cancelled one: %v", err)
	}
}

func TestBarrierWithoutMount(t *testing.T) {
	c, err := Dial(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Barrier(context.Background()); !errors.Is(err, ErrNoMount) {
		t.Fatalf("no mount: %v, want ErrNoMount", err)
	}
}
