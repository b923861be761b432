package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// What a client asked of its connection, and the framing of a held
// response, survive the proxy.

// The client's own keep-alive preference decides, not the upstream's
// "Connection: close": an HTTP/1.0 client that asks for keep-alive keeps
// its connection, one that does not ask, or an HTTP/1.1 client that says
// close, gets it closed.
func TestClientKeepAlivePreference(t *testing.T) {
	r := start(t, "", nil)
	for _, c := range []struct {
		req       string
		keepAlive bool
	}{
		{"POST /kv/a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nv", true},
		{"POST /kv/b HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 1\r\n\r\nv", false},
		{"POST /kv/c HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nv", true},
		{"POST /kv/d HTTP/1.0\r\nHost: x\r\nContent-Length: 1\r\n\r\nv", false},
	} {
		conn, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, c.req)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// A kept connection answers a second request; a closed one is EOF.
		io.WriteString(conn, "GET /kv/a HTTP/1.1\r\nHost: x\r\n\r\n")
		_, err = http.ReadResponse(br, nil)
		if kept := err == nil; kept != c.keepAlive || resp.StatusCode != http.StatusCreated {
			t.Errorf("%q: status %d, connection kept %v (err %v), want kept %v", strings.SplitN(c.req, "\r\n", 2)[0], resp.StatusCode, kept, err, c.keepAlive)
		}
		conn.Close()
	}
}

// Held responses keep their framing: a HEAD answer keeps the length of
// the body it describes, a large body is spooled to disk and arrives
// whole, and trailers survive.
func TestHeldResponsesKeepTheirFraming(t *testing.T) {
	big := strings.Repeat("0123456789", 300_000) // 3 MB: past spool-memory
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			if r.Method != http.MethodHead {
				io.WriteString(w, big)
			}
		case "/trailer":
			w.Header().Set("Trailer", "X-Checksum")
			io.WriteString(w, "body")
			w.Header().Set("X-Checksum", "abc")
		}
	})
	r := start(t, "spool-memory=65536", up)
	resp, err := http.Head("http://" + r.addr + "/big")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ContentLength != int64(len(big)) {
		t.Fatalf("HEAD: Content-Length %d, want %d", resp.ContentLength, len(big))
	}
	resp, err = http.Get("http://" + r.addr + "/big")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != big {
		t.Fatalf("GET: %d bytes, want %d", len(got), len(big))
	}
	resp, err = http.Get("http://" + r.addr + "/trailer")
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != "body" || resp.Trailer.Get("X-Checksum") != "abc" {
		t.Fatalf("trailer response: %q, trailer %v", got, resp.Trailer)
	}
	if r.host.Barriers() != 3 {
		t.Fatalf("%d barriers for 3 held responses", r.host.Barriers())
	}
}
