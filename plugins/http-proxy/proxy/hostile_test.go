package proxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Hostile and unlucky clients, upstreams and machines, each found by a
// black-box sweep of the proxy: none may get a response its barrier did
// not cover, or keep other clients out.

// A client that half-closes its side after its request (nc -N, socat,
// some HTTP/1.0 clients) is taken for gone by Go's server. While its
// response was held, that made the handler return with nothing written,
// and net/http sent an empty 200 OK at once: a write acknowledged before
// any barrier covered it. It must get the held response or nothing.
func TestHalfClosedClientGetsNoUnheldAnswer(t *testing.T) {
	r := start(t, "", nil)
	r.host.SetDelay(time.Hour)
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "POST /kv/h HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	got, _ := io.ReadAll(c)
	if len(got) > 0 {
		t.Fatalf("a half-closed client got %q while its barrier had not returned", got)
	}
	if n := r.svc.Posts.Load(); n > 1 {
		t.Fatalf("service saw %d posts; the proxy must not retry", n)
	}
}

// A streamed (durability none) response whose copy to the client fails
// ends in a panic inside the reverse proxy. Its upstream slot was never
// given back: after as many as the pool holds, every request was shed.
func TestAbortedStreamsGiveTheirSlotsBack(t *testing.T) {
	big := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			w.WriteHeader(http.StatusCreated)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(64<<20))
		chunk := make([]byte, 64<<10)
		for i := 0; i < 1024; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	r := start(t, "pool=2,queue-timeout=2s,none=GET:/big", big)
	for i := 0; i < 6; i++ {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
		buf := make([]byte, 64<<10)
		io.ReadFull(c, buf) // the stream has begun
		c.(*net.TCPConn).SetLinger(0)
		c.Close() // and breaks off
	}
	time.Sleep(200 * time.Millisecond)
	resp, err := http.Post("http://"+r.addr+"/kv/after", "text/plain", strings.NewReader("v"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("after 6 aborted streams on a pool of 2: status %d", resp.StatusCode)
	}
}

// barrier-timeout bounds how long any response is held. A response that
// joined the next round while the only barrier ran waited for that one
// to time out first, then for its own: twice the timeout.
func TestHoldIsBoundedByBarrierTimeout(t *testing.T) {
	r := start(t, "barrier-timeout=1s,barriers=1", nil)
	r.host.SetDelay(time.Hour)
	first := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+r.addr+"/kv/a", "text/plain", strings.NewReader("v"))
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	time.Sleep(300 * time.Millisecond) // the first barrier runs
	began := time.Now()
	resp := post(t, http.DefaultClient, r.addr, "b", "v")
	if took := time.Since(began); resp.StatusCode != http.StatusServiceUnavailable || took > 1500*time.Millisecond {
		t.Fatalf("second response: status %d after %v; barrier-timeout is 1s", resp.StatusCode, took)
	}
	if code := <-first; code != http.StatusServiceUnavailable {
		t.Fatalf("first response: status %d", code)
	}
}

// echoTunnel is an upstream that answers an Upgrade with 101 and then
// echoes all it receives, until the client goes; other requests get 201.
func echoTunnel(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") == "" {
		w.WriteHeader(http.StatusCreated)
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	brw.Flush()
	io.Copy(c, brw)
}

// A tunnel (101 Switching Protocols) gives its pool slot back: as many
// open WebSockets as the pool holds shed every other request before.
// CONNECT, which this proxy does not tunnel, is refused, not answered 200.
func TestTunnelsLeaveThePool(t *testing.T) {
	r := start(t, "pool=2,queue-timeout=1s,idle-timeout=500ms", http.HandlerFunc(echoTunnel))
	// On a connection that served a response first, so a write deadline
	// from it would be left over.
	kept, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	fmt.Fprint(kept, "POST /kv/first HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nv")
	kr := bufio.NewReader(kept)
	if resp, err := http.ReadResponse(kr, nil); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("first request: %v %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	fmt.Fprint(kept, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	if resp, err := http.ReadResponse(kr, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade after a request: %v %v", resp, err)
	}
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.Contains(line, "101") {
			t.Fatalf("tunnel %d: %q %v", i, line, err)
		}
	}
	if resp := post(t, http.DefaultClient, r.addr, "k", "v"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("with 3 tunnels open on a pool of 2: status %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodConnect, "http://"+r.addr, nil)
	req.Host = "example.com:443"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("CONNECT: status %d", resp.StatusCode)
	}
	// A tunnel quiet for longer than idle-timeout still carries data.
	time.Sleep(time.Second)
	fmt.Fprint(kept, "ping")
	kept.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(kr, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("a tunnel quiet past idle-timeout: %q %v", buf, err)
	}
}

// Failures that are not the service's are not answered as if they were
// (502, "the service did not answer"): a client's unreadable body is its
// own mistake (400), and a response the proxy cannot spool to hold it is
// this machine's trouble (503, withheld: the service did act on it).
func TestLocalFailuresAreNotBadGateway(t *testing.T) {
	r := start(t, "spool-memory=16", nil)
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "POST /kv/c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, " 400 ") {
		t.Fatalf("a bad chunk size: %q %v, want 400", line, err)
	}
	post(t, http.DefaultClient, r.addr, "big", strings.Repeat("x", 4096))
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	resp, err := http.Get("http://" + r.addr + "/kv/big")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "could not keep its response") {
		t.Fatalf("a response that cannot be spooled: %d %q", resp.StatusCode, body)
	}
	if n := r.metric(t, "pbfs_proxy_shed_total", `reason="spool"`); n != 1 {
		t.Fatalf("shed{spool} = %v", n)
	}
}

// A client that stops reading its response is cut off after idle-timeout
// without progress: it held its request, its admission and the spooled
// body (on disk past spool-memory) for as long as it stayed connected.
func TestClientThatStopsReadingIsCutOff(t *testing.T) {
	big := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), 64<<20))
	})
	r := start(t, "idle-timeout=1s,spool-memory=1024", big)
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprint(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	deadline := time.Now().Add(20 * time.Second)
	for r.metric(t, "pbfs_proxy_inflight_requests", "") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a client that reads nothing still holds its request after 20 s; idle-timeout is 1s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A body trickled in holds no upstream slot while it arrives: the proxy
// reads it whole first (nginx's request buffering). Streamed through, as
// many slow uploads as the pool holds shed every other request. The
// buffered body reaches the service whole, chunked or not.
func TestSlowUploadsHoldNoSlot(t *testing.T) {
	r := start(t, "pool=2,queue-timeout=2s", nil)
	for i := 0; i < 4; i++ {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /kv/slow%d HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nx", i)
	}
	time.Sleep(200 * time.Millisecond) // all four are sending their bodies
	if resp := post(t, http.DefaultClient, r.addr, "k", "v"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("with 4 uploads under way on a pool of 2: status %d", resp.StatusCode)
	}
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "POST /kv/chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("no final answer to a chunked upload: %v", err)
		}
		if strings.HasPrefix(line, "HTTP/1.1 1") || line == "\r\n" {
			continue // 100 Continue, once
		}
		if !strings.Contains(line, " 201 ") {
			t.Fatalf("a chunked upload: %q", line)
		}
		break
	}
	resp, err := http.Get("http://" + r.addr + "/kv/chunked")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != "hello world" {
		t.Fatalf("the service got %q", got)
	}
}

// An HTTP/1.0 request without Host reaches the service without an empty
// X-Forwarded-Host, which some frameworks take for the host to link to.
func TestNoEmptyForwardedHost(t *testing.T) {
	seen := make(chan []string, 1)
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Values("X-Forwarded-Host")
	})
	r := start(t, "none=GET:", up)
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET / HTTP/1.0\r\n\r\n")
	io.ReadAll(c)
	if v := <-seen; len(v) != 0 {
		t.Fatalf("X-Forwarded-Host %q", v)
	}
}

// A WebSocket client may send its first frames with the handshake, before
// it has seen the 101: those bytes reach the upstream first, in order.
// They were in the server's read buffer when the proxy took the
// connection, and were dropped.
func TestTunnelKeepsBytesSentWithTheHandshake(t *testing.T) {
	r := start(t, "", http.HandlerFunc(echoTunnel))
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nearly frames|")
	cr := bufio.NewReader(c)
	resp, err := http.ReadResponse(cr, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	fmt.Fprint(c, "later")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	want := "early frames|later"
	got := make([]byte, len(want))
	if n, err := io.ReadFull(cr, got); err != nil || string(got) != want {
		t.Fatalf("the upstream got %q (%v), want %q", got[:n], err, want)
	}
}
