package delayproxy

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go serveEcho(ln)
	return ln.Addr().String()
}

// dialEcho connects to an echo server through a proxy with delay; both
// close at the end of the test.
func dialEcho(t *testing.T, delay time.Duration) (*Proxy, net.Conn) {
	t.Helper()
	px, err := New("127.0.0.1:0", echoServer(t), delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	c, err := net.Dial("tcp", px.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return px, c
}

// TestDelayProxyDelaysEachWay: a round trip through the proxy takes at
// least twice the delay, and not much more.
func TestDelayProxyDelaysEachWay(t *testing.T) {
	const delay = 5 * time.Millisecond
	px, c := dialEcho(t, delay)
	buf := make([]byte, 100)
	var best time.Duration
	for i := 0; i < 10; i++ {
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		if d < 2*delay {
			t.Fatalf("round trip %s, below twice the delay %s", d, delay)
		}
		if i == 0 || d < best {
			best = d
		}
	}
	// Generous: the machine may be busy.
	if best > 2*delay+20*time.Millisecond {
		t.Errorf("fastest round trip %s, want about %s", best, 2*delay)
	}
	// The proxy counts a chunk after forwarding it: give the last count a
	// moment to land.
	up, down := px.Bytes()
	for deadline := time.Now().Add(2 * time.Second); (up != 1000 || down != 1000) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		up, down = px.Bytes()
	}
	if up != 1000 || down != 1000 {
		t.Errorf("counted %d bytes up and %d down, want 1000 each", up, down)
	}
}

// TestDelayProxyKeepsBytesAndOrder streams 8 MiB each way concurrently
// through the proxy and checks what comes back, and that a half-close
// reaches the far side.
func TestDelayProxyKeepsBytesAndOrder(t *testing.T) {
	_, c := dialEcho(t, 200*time.Microsecond)
	want := make([]byte, 8<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	go func() {
		for off := 0; off < len(want); {
			n := min(1+r.IntN(100<<10), len(want)-off)
			c.Write(want[off : off+n])
			off += n
		}
		c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes back, want the %d sent, in order", len(got), len(want))
	}
}
