package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// Request bodies: how long a client may take to send one, how large it
// may be, and how much of the disk all of them may take at once.

// trickle keeps a slow upload going until stop: a POST announcing 1 MiB
// whose body comes a byte every 100 ms. Once the proxy cuts it off it
// connects again a moment later, as a persistent slow client would.
func trickle(addr string, i int, stop <-chan struct{}, cut *atomic.Int64) {
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			fmt.Fprintf(c, "POST /kv/slow%d HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n", i)
			for err == nil {
				select {
				case <-stop:
					c.Close()
					return
				case <-time.After(100 * time.Millisecond):
				}
				_, err = c.Write([]byte("x"))
			}
			c.Close()
			cut.Add(1)
		}
		select {
		case <-stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// More clients trickling request bodies than the proxy takes connections
// (at 256 descriptors, 144 of them kept every other client at 503 for a
// whole 70 s run): a client that sends its request at once must still be
// answered. The proxy makes room by cutting off the slowest upload.
func TestSlowBodiesKeepNoClientOut(t *testing.T) {
	const conns = 16
	r := start(t, fmt.Sprintf("max-conns=%d", conns), nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var cut atomic.Int64
	for i := 0; i < conns+8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			trickle(r.addr, i, stop, &cut)
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for r.metric(t, "pbfs_proxy_client_connections", "") < conns {
		if time.Now().After(deadline) {
			t.Fatal("the slow clients never took every connection")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // long enough to count as slow
	c := &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}
	defer c.CloseIdleConnections()
	for i := 0; i < 20; i++ {
		began := time.Now()
		resp := post(t, c, r.addr, fmt.Sprint("fast", i), fmt.Sprint("v", i))
		if took := time.Since(began); resp.StatusCode != http.StatusCreated || took > 10*time.Second {
			t.Fatalf("fast request %d among %d slow uploads: status %d after %v", i, conns+8, resp.StatusCode, took)
		}
	}
	resp, err := c.Get("http://" + r.addr + "/kv/fast19")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != "v19" {
		t.Fatalf("the service holds %q", got)
	}
	if n := r.metric(t, "pbfs_proxy_client_evictions_total", `reason="slow-body"`); n == 0 {
		t.Fatal("fast clients got in, yet no slow upload was cut off")
	}
	t.Logf("%d slow uploads cut off or refused", cut.Load())
}

// A body that arrives slower than body-min-rate, once body-timeout has
// passed, is answered 408 and its connection closed; one that keeps the
// rate may take as long as it needs and reaches the service whole.
func TestSlowBodyTimesOut(t *testing.T) {
	r := start(t, "body-timeout=1s,body-min-rate=1000", nil)
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "POST /kv/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
	went := make(chan struct{})
	go func() {
		defer close(went)
		for {
			time.Sleep(100 * time.Millisecond)
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a body trickled below body-min-rate got no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
		t.Fatalf("a body trickled below body-min-rate: %d (close %v), want 408 and the connection closed", resp.StatusCode, resp.Close)
	}
	<-went
	if r.svc.Posts.Load() != 0 {
		t.Fatalf("the service saw %d posts", r.svc.Posts.Load())
	}
	// 3 s at 20 KB/s: three times body-timeout, far above the rate.
	pr, pw := io.Pipe()
	go func() {
		chunk := strings.Repeat("y", 2000)
		for i := 0; i < 30; i++ {
			pw.Write([]byte(chunk))
			time.Sleep(100 * time.Millisecond)
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.addr+"/kv/steady", pr)
	req.ContentLength = 60000
	got, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got.Body.Close()
	if got.StatusCode != http.StatusCreated {
		t.Fatalf("a body sent at 20 KB/s for 3 s: %d", got.StatusCode)
	}
	if body := fetch(t, r.addr, "steady"); len(body) != 60000 {
		t.Fatalf("the service holds %d bytes of 60000", len(body))
	}
}

// fetch GETs a key through the proxy.
func fetch(t *testing.T, addr, key string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/kv/" + key)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A body past max-body is refused with 413: at once when its length is
// announced, and without a byte past the cap spooled when it is chunked
// (the spool directory here is a small file system with max-body and a
// little more free: more would fail with ENOSPC, a 503). A 1 GiB body
// used to be spooled whole.
func TestOversizedBodyIs413(t *testing.T) {
	const limit = 1 << 20 // what the test service keeps of a body
	r := start(t, fmt.Sprintf("max-body=%d,spool-memory=65536,none=GET:", limit), nil)
	dir := fstest.SmallFS(t, 32<<20)
	t.Setenv("TMPDIR", dir)
	fstest.TakeSpace(t, dir, limit+256<<10)
	free, _ := fstest.FreeSpace(t, dir)

	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "POST /kv/huge HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\nxxxx")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 1 GiB Content-Length: %v %v, want 413 before the body", resp, err)
	}

	pr, pw := io.Pipe()
	go func() {
		chunk := make([]byte, 64<<10)
		for i := 0; i < 1024; i++ { // 64 MiB, chunked
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	got, err := http.Post("http://"+r.addr+"/kv/chunked", "application/octet-stream", pr)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(got.Body)
	got.Body.Close()
	pr.CloseWithError(io.ErrClosedPipe)
	if got.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(msg), "max-body") {
		t.Fatalf("a 64 MiB chunked body: %d %q, want 413 naming max-body", got.StatusCode, msg)
	}
	if r.svc.Posts.Load() != 0 {
		t.Fatalf("the service saw %d posts", r.svc.Posts.Load())
	}
	// A body of exactly max-body passes, whole.
	post(t, http.DefaultClient, r.addr, "full", strings.Repeat("z", limit))
	if body := fetch(t, r.addr, "full"); len(body) != limit {
		t.Fatalf("the service holds %d bytes of %d", len(body), limit)
	}
	if after, _ := fstest.FreeSpace(t, dir); after < free {
		t.Fatalf("spool space not given back: %d bytes free, %d before", after, free)
	}
	if n := r.metric(t, "pbfs_proxy_request_body_errors_total", `reason="too-large"`); n != 2 {
		t.Fatalf("body errors{too-large} = %v", n)
	}
}

// spool-disk bounds the bytes of all spooled bodies together; request
// bodies may take half of it. A body that does not fit gets 503 with
// Retry-After (nothing reached the service) and the others go on.
func TestSpoolDiskIsBoundedInTotal(t *testing.T) {
	release := make(chan struct{})
	var seen atomic.Int64
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		seen.Add(1)
		<-release
		fmt.Fprint(w, n)
	})
	r := start(t, "pool=1,spool-memory=1024,max-body=1048576,spool-disk=4194304,none=POST:", up)
	body := strings.Repeat("b", 1<<20)
	codes := make(chan int, 2)
	for i := 0; i < 2; i++ { // 2 MiB spooled: the half of spool-disk uploads may take
		go func() {
			resp, err := http.Post("http://"+r.addr+"/up", "text/plain", strings.NewReader(body))
			if err != nil {
				codes <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.metric(t, "pbfs_proxy_spool_bytes", "") < 2<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("two bodies not spooled: %v bytes", r.metric(t, "pbfs_proxy_spool_bytes", ""))
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Post("http://"+r.addr+"/up", "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(msg), "spool-disk") {
		t.Fatalf("a third body past spool-disk: %d %q", resp.StatusCode, msg)
	}
	close(release)
	for i := 0; i < 2; i++ {
		if code := <-codes; code != http.StatusOK {
			t.Fatalf("a spooled upload: %d", code)
		}
	}
	if seen.Load() != 2 {
		t.Fatalf("the service saw %d uploads, want the 2 spooled", seen.Load())
	}
	if n := r.metric(t, "pbfs_proxy_spool_bytes", ""); n != 0 {
		t.Fatalf("%v bytes still spooled", n)
	}
	if resp := post(t, http.DefaultClient, r.addr, "after", body); resp.StatusCode != http.StatusOK {
		t.Fatalf("once the spool emptied: %d", resp.StatusCode)
	}
}
