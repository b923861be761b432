package coord

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
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
// with the http-proxy plugin's upstream-wait set to wait.
func forwardingNode(t *testing.T, wait string) (n *Node, front string) {
	t.Helper()
	c := etcdtest.Start(t, 1)
	eps := strings.Split(strings.TrimPrefix(c.Endpoints(), "etcd://"), ",")
	front = freeAddr(t)
	plugins := []host.Spec{{Name: "http-proxy", Config: map[string]string{"listen": front, "upstream-wait": wait}}}
	n, err := Open(Config{Endpoints: eps, Name: "a", Listen: "127.0.0.1:0", Proxy: front, Mount: mount.Config{Plugins: plugins}})
	must(t, err)
	t.Cleanup(func() { n.Close() })
	stop, err := n.startForwarding()
	must(t, err)
	t.Cleanup(stop)
	return n, front
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func TestForwardWaitsForTheNewPrimary(t *testing.T) {
	n, front := forwardingNode(t, "10s")
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
		ln, err := net.Listen("tcp", primaryFront)
		if err != nil {
			t.Error(err)
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen.Add(1)
			w.WriteHeader(http.StatusCreated)
			io.Copy(w, r.Body)
		})}
		t.Cleanup(func() { srv.Close() })
		srv.Serve(ln)
	}()
	began := time.Now()
	resp, err := http.Post("http://"+front+"/kv/k", "text/plain", strings.NewReader("the body"))
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || string(body) != "the body" {
		t.Fatalf("forwarded during a failover: %d %q after %v", resp.StatusCode, body, time.Since(began))
	}
	if seen.Load() != 1 {
		t.Fatalf("the new primary saw the request %d times", seen.Load())
	}
	t.Logf("answered after %v", time.Since(began))
}

// With no primary for the whole wait, the answer is 503 with Retry-After.
func TestForwardWithNoPrimaryIs503(t *testing.T) {
	_, front := forwardingNode(t, "1s")
	began := time.Now()
	resp, err := http.Post("http://"+front+"/kv/k", "text/plain", strings.NewReader("v"))
	must(t, err)
	resp.Body.Close()
	if took := time.Since(began); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || took < 900*time.Millisecond {
		t.Fatalf("no primary: %d (Retry-After %q) after %v; upstream-wait is 1s", resp.StatusCode, resp.Header.Get("Retry-After"), took)
	}
}
