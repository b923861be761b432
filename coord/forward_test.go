package coord

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/etcdtest"
	"github.com/pbfs/pbfs/mount"
	"github.com/pbfs/pbfs/plugins/sdk/host"
)

// A backup's frontend address during a failover: first no primary, then
// a primary whose frontend does not listen yet. A request made then waits
// (the http-proxy plugin's upstream-wait) and is answered by the new
// primary, once; it used to get 503 at once.

// forwardingNode is node "a" as a backup forwarding its frontend address,
// with the http-proxy plugin's upstream-wait set to wait; stop is what
// its promotion calls.
func forwardingNode(t *testing.T, wait string) (n *Node, front string, stop func()) {
	t.Helper()
	c := etcdtest.Start(t, 1)
	eps := strings.Split(strings.TrimPrefix(c.Endpoints(), "etcd://"), ",")
	front = freeAddr(t)
	plugins := []host.Spec{{Name: "http-proxy", Config: map[string]string{"listen": front, "upstream-wait": wait}}}
	n, err := Open(Config{Endpoints: eps, Name: "a", Listen: "127.0.0.1:0", Proxy: front, Mount: mount.Config{Plugins: plugins}})
	must(t, err)
	t.Cleanup(func() { n.Close() })
	release, err := n.startForwarding()
	must(t, err)
	var once sync.Once
	stop = func() { once.Do(release) }
	t.Cleanup(stop)
	return n, front, stop
}

// serveFront serves addr as a frontend answering 201 with the body.
func serveFront(t *testing.T, addr string, seen *atomic.Int64) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Error(err)
		return
	}
	serveFrontOn(t, ln, seen)
}

// serveFrontOn serves ln as serveFront does.
func serveFrontOn(t *testing.T, ln net.Listener, seen *atomic.Int64) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.Copy(w, r.Body)
	})}
	t.Cleanup(func() { srv.Close() })
	srv.Serve(ln)
}

// postFront posts body through front and wants it answered 201, once.
func postFront(t *testing.T, front, body string, seen *atomic.Int64) {
	t.Helper()
	began := time.Now()
	resp, err := http.Post("http://"+front+"/kv/k", "text/plain", strings.NewReader(body))
	must(t, err)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || string(got) != body {
		t.Fatalf("forwarded during a failover: %d %q after %v", resp.StatusCode, got, time.Since(began))
	}
	if seen.Load() != 1 {
		t.Fatalf("the new primary saw the request %d times", seen.Load())
	}
	t.Logf("answered after %v", time.Since(began))
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func TestForwardWaitsForTheNewPrimary(t *testing.T) {
	n, front, _ := forwardingNode(t, "10s")
	primaryFront := freeAddr(t)
	var seen atomic.Int64
	go func() {
		time.Sleep(500 * time.Millisecond) // the election
		_, err := n.cli.Put(context.Background(), n.k.leader(), encode(Leader{Name: "b", Proxy: primaryFront, Epoch: 6}))
		if err != nil {
			t.Error(err)
			return
		}
		time.Sleep(500 * time.Millisecond) // the new primary's plugin starts
		serveFront(t, primaryFront, &seen)
	}()
	postFront(t, front, "the body", &seen)
}

// The node itself wins the election while a request waits: its promotion
// releases the address at once (had it waited for the request, the new
// primary's lease could expire meanwhile), and the request goes to the
// node's own plugin once it serves there, on the socket the node keeps
// (as sdk.Listen takes it).
func TestForwardWaitsThroughItsOwnPromotion(t *testing.T) {
	n, front, stop := forwardingNode(t, "10s")
	var seen atomic.Int64
	go func() {
		time.Sleep(500 * time.Millisecond) // the request waits
		_, err := n.cli.Put(context.Background(), n.k.leader(), encode(Leader{Name: "a", Proxy: front, Epoch: 6}))
		if err != nil {
			t.Error(err)
			return
		}
		began := time.Now()
		stop()
		if took := time.Since(began); took > 100*time.Millisecond {
			t.Errorf("releasing the address took %v", took)
		}
		time.Sleep(300 * time.Millisecond) // the plugin starts
		ln, err := net.FileListener(n.front)
		if err != nil {
			t.Error(err)
			return
		}
		serveFrontOn(t, ln, &seen)
	}()
	postFront(t, front, "the body", &seen)
}

// With no primary for the whole wait, the answer is 503 with Retry-After.
func TestForwardWithNoPrimaryIs503(t *testing.T) {
	_, front, _ := forwardingNode(t, "1s")
	began := time.Now()
	resp, err := http.Post("http://"+front+"/kv/k", "text/plain", strings.NewReader("v"))
	must(t, err)
	resp.Body.Close()
	if took := time.Since(began); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || took < 900*time.Millisecond {
		t.Fatalf("no primary: %d (Retry-After %q) after %v; upstream-wait is 1s", resp.StatusCode, resp.Header.Get("Retry-After"), took)
	}
}

// A primary lost with a forwarded request (its frontend read the request
// and closed the connection): a POST is not sent again, and its client is
// told it may or may not have been applied; a POST with an Idempotency-Key
// is sent to the next primary, which answers it once.
func TestForwardReplaysOnlyReplayable(t *testing.T) {
	n, front, _ := forwardingNode(t, "10s")
	lost, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { lost.Close() })
	var took atomic.Int64 // requests the lost primary read
	go func() {
		for {
			c, err := lost.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			c.SetReadDeadline(time.Now().Add(time.Second))
			c.Read(buf)
			took.Add(1)
			c.Close()
		}
	}()
	lead := func(name, proxy string) {
		if _, err := n.cli.Put(context.Background(), n.k.leader(), encode(Leader{Name: name, Proxy: proxy, Epoch: 6})); err != nil {
			t.Fatal(err)
		}
	}
	lead("b", lost.Addr().String())

	resp, err := http.Post("http://"+front+"/kv/k", "text/plain", strings.NewReader("once"))
	must(t, err)
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(msg), "may or may not have been applied") || took.Load() != 1 {
		t.Fatalf("a POST the lost primary read: %d %q, read %d times", resp.StatusCode, msg, took.Load())
	}

	next := freeAddr(t)
	var seen atomic.Int64
	go func() {
		for took.Load() < 2 {
			time.Sleep(5 * time.Millisecond)
		}
		lead("c", next)
		serveFront(t, next, &seen)
	}()
	req, _ := http.NewRequest(http.MethodPost, "http://"+front+"/kv/k", strings.NewReader("again"))
	req.Header.Set("Idempotency-Key", "k-1")
	resp, err = http.DefaultClient.Do(req)
	must(t, err)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || string(got) != "again" || seen.Load() != 1 {
		t.Fatalf("a POST with an idempotency key, the primary lost with it: %d %q, the next primary saw it %d times", resp.StatusCode, got, seen.Load())
	}
}
