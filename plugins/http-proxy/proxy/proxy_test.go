package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/testservice"
	"github.com/pbfs/pbfs/plugins/http-proxy/proxy"
	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/sdktest"
)

// serve runs h as the upstream service on loopback.
func serve(t testing.TB, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

type rig struct {
	addr, metrics string
	host          *sdktest.Host
	svc           *testservice.Service
}

// start runs the proxy in-process (through the SDK harness) in front of
// a test service.
func start(t testing.TB, extra string, up http.Handler) *rig {
	t.Helper()
	var svc *testservice.Service
	if up == nil {
		svc = &testservice.Service{Dir: t.TempDir()}
		up = svc
	}
	r := startTo(t, extra, serve(t, up))
	r.svc = svc
	return r
}

// startTo runs the proxy in front of whatever serves upstream, host:port
// (perhaps nothing yet).
func startTo(t testing.TB, extra, upstream string) *rig {
	t.Helper()
	r := &rig{addr: fstest.FreeAddr(t), metrics: fstest.FreeAddr(t), host: sdktest.NewHost()}
	// procs=0: the proxy runs in the test's process, whose GOMAXPROCS it
	// must leave alone.
	cfg := sdk.Config{"listen": r.addr, "upstream": "http://" + upstream, "metrics": r.metrics, "procs": "0"}
	for _, kv := range strings.Split(extra, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			cfg[k] = v
		}
	}
	p := sdktest.Serve(t, proxy.New())
	if err := p.StartFrontend(context.Background(), "http-proxy", cfg, r.host); err != nil {
		t.Fatal(err)
	}
	return r
}

// metric reads a sample from the proxy's /metrics, summing the label
// sets that contain label.
func (r *rig) metric(t *testing.T, name, label string) float64 {
	t.Helper()
	return fstest.ScrapeSum(t, "http://"+r.metrics+"/metrics", name, label)
}

// tally counts the outcomes of POSTs: 201, 503 (shed) or anything else,
// transport errors included.
type tally struct{ ok, shed, other atomic.Int64 }

func (n *tally) post(c *http.Client, url string) {
	resp, err := c.Post(url, "text/plain", strings.NewReader("v"))
	if err != nil {
		n.other.Add(1)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusCreated:
		n.ok.Add(1)
	case http.StatusServiceUnavailable:
		n.shed.Add(1)
	default:
		n.other.Add(1)
	}
}

// countingClient counts the connections it opens.
func countingClient(dials *atomic.Int64) *http.Client {
	d := &net.Dialer{}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: 1,
		DialContext: func(ctx context.Context, n, a string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, n, a)
		},
	}}
}

func post(t *testing.T, c *http.Client, addr, key, body string) *http.Response {
	t.Helper()
	resp, err := c.Post("http://"+addr+"/kv/"+key, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// The upstream answers "Connection: close" to every request; clients of
// the proxy keep one connection for all of theirs.
func TestClientsKeepAliveDespiteConnectionClose(t *testing.T) {
	r := start(t, "pool=2", nil)
	var dials atomic.Int64
	c := countingClient(&dials)
	for i := 0; i < 50; i++ {
		resp := post(t, c, r.addr, fmt.Sprint("k", i), "v")
		if resp.StatusCode != http.StatusCreated || resp.Close || resp.Header.Get("Connection") != "" {
			t.Fatalf("request %d: %d close=%v Connection=%q", i, resp.StatusCode, resp.Close, resp.Header.Get("Connection"))
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("client opened %d connections for 50 requests", n)
	}
	if up := r.metric(t, "pbfs_proxy_upstream_connections", ""); up > 2 {
		t.Fatalf("%v upstream connections open, pool is 2", up)
	}
}

// With an upstream that allows keep-alive, the proxy opens at most pool
// connections however many requests and clients there are.
func TestUpstreamPoolIsBounded(t *testing.T) {
	svc := &testservice.Service{Dir: t.TempDir(), KeepAlive: true}
	r := start(t, "pool=4", svc)
	var wg sync.WaitGroup
	var bad atomic.Int64
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dials atomic.Int64
			c := countingClient(&dials)
			for i := 0; i < 20; i++ {
				resp, err := c.Post(fmt.Sprintf("http://%s/kv/w%d-%d", r.addr, w, i), "text/plain", strings.NewReader("x"))
				if err != nil || resp.StatusCode != http.StatusCreated {
					bad.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d requests failed", bad.Load())
	}
	if d := r.metric(t, "pbfs_proxy_upstream_dials_total", ""); d > 4 {
		t.Fatalf("%v upstream dials for 640 requests with pool=4", d)
	}
	if svc.Posts.Load() != 640 {
		t.Fatalf("service saw %d posts", svc.Posts.Load())
	}
}

// A response waits for a barrier that starts after it was produced.
func TestResponseHeldForBarrier(t *testing.T) {
	r := start(t, "", nil)
	r.host.SetDelay(300 * time.Millisecond)
	began := time.Now()
	resp := post(t, http.DefaultClient, r.addr, "k", "v")
	if took := time.Since(began); resp.StatusCode != http.StatusCreated || took < 300*time.Millisecond {
		t.Fatalf("status %d after %v; the barrier takes 300ms", resp.StatusCode, took)
	}
	if r.host.Barriers() != 1 {
		t.Fatalf("%d barriers", r.host.Barriers())
	}
}

// A failed barrier turns the response into a 503, never the held 2xx.
func TestFailedBarrierIs503(t *testing.T) {
	r := start(t, "", nil)
	r.host.SetErr(errors.New("backup 10.0.0.2:7000 is down"))
	resp, err := http.Post("http://"+r.addr+"/kv/k", "text/plain", strings.NewReader("v"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "could not be made durable") {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if r.svc.Posts.Load() != 1 {
		t.Fatalf("service saw %d posts; the proxy must not retry", r.svc.Posts.Load())
	}
}

// A barrier that does not return within barrier-timeout is a 503 too.
func TestBarrierTimeoutIs503(t *testing.T) {
	r := start(t, "barrier-timeout=200ms", nil)
	r.host.SetDelay(time.Hour)
	began := time.Now()
	resp := post(t, http.DefaultClient, r.addr, "k", "v")
	if resp.StatusCode != http.StatusServiceUnavailable || time.Since(began) > 5*time.Second {
		t.Fatalf("status %d after %v", resp.StatusCode, time.Since(began))
	}
}

// Responses waiting together share barriers (group commit).
func TestConcurrentResponsesShareBarriers(t *testing.T) {
	r := start(t, "pool=16", nil)
	r.host.SetDelay(50 * time.Millisecond)
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(fmt.Sprintf("http://%s/kv/c%d", r.addr, i), "text/plain", strings.NewReader("v"))
			if err == nil {
				if resp.StatusCode == http.StatusCreated {
					ok.Add(1)
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 100 {
		t.Fatalf("%d of 100 succeeded", ok.Load())
	}
	if b := r.host.Barriers(); b > 40 {
		t.Fatalf("%d barriers for 100 concurrent responses: no grouping", b)
	}
	t.Logf("100 concurrent responses released by %d barriers", r.host.Barriers())
}

// Routes declared durability none are not held.
func TestNoneRouteIsNotHeld(t *testing.T) {
	r := start(t, "none=GET:/kv/", nil)
	post(t, http.DefaultClient, r.addr, "k", "v")
	n := r.host.Barriers()
	r.host.SetDelay(time.Hour)
	resp, err := http.Get("http://" + r.addr + "/kv/k")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "v" || r.host.Barriers() != n {
		t.Fatalf("GET: %d %q, barriers %d -> %d", resp.StatusCode, body, n, r.host.Barriers())
	}
}

// An upstream that drops the connection mid-request gets the POST once:
// the client sees 502, the proxy never retries.
func TestPostIsNeverRetried(t *testing.T) {
	var seen atomic.Int64
	drop := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		io.Copy(io.Discard, r.Body)
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			c.Close()
		}
	})
	r := start(t, "", drop)
	for i := 0; i < 3; i++ {
		resp, err := http.Post("http://"+r.addr+"/kv/k", "text/plain", strings.NewReader("v"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if seen.Load() != 3 {
		t.Fatalf("upstream saw %d requests for 3 POSTs", seen.Load())
	}
}

// Past max-inflight, requests are shed with 503 at once and counted.
func TestOverloadIsShed(t *testing.T) {
	r := start(t, "max-inflight=4", nil)
	r.host.SetDelay(300 * time.Millisecond)
	var wg sync.WaitGroup
	var n tally
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.post(http.DefaultClient, fmt.Sprintf("http://%s/kv/o%d", r.addr, i))
		}()
	}
	wg.Wait()
	ok, shed := n.ok.Load(), n.shed.Load()
	if ok == 0 || shed == 0 || ok+shed != 40 {
		t.Fatalf("ok %d shed %d of 40", ok, shed)
	}
	if m := r.metric(t, "pbfs_proxy_shed_total", `reason="overloaded"`); m != float64(shed) {
		t.Fatalf("metric says %v shed, clients saw %d", m, shed)
	}
}

// TestEveryResponseCoveredByALaterBarrier checks output commit as a
// property: for every 2xx a client received, some barrier started after
// the service had finished that request and ended before the client got
// the response. 300 concurrent requests, barriers of random length.
func TestEveryResponseCoveredByALaterBarrier(t *testing.T) {
	var mu sync.Mutex
	finished := map[string]time.Time{}
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		mu.Lock()
		finished[r.URL.Path] = time.Now()
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	})
	addr, h := fstest.FreeAddr(t), &recordingHost{}
	p := sdktest.Serve(t, proxy.New())
	if err := p.StartFrontend(context.Background(), "http-proxy", sdk.Config{"listen": addr, "upstream": "http://" + serve(t, up), "procs": "0"}, h); err != nil {
		t.Fatal(err)
	}
	received := map[string]time.Time{}
	var wg sync.WaitGroup
	for i := 0; i < 300; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := fmt.Sprintf("/kv/r%d", i)
			resp, err := http.Post("http://"+addr+path, "text/plain", strings.NewReader("v"))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			now := time.Now()
			if resp.StatusCode == http.StatusCreated {
				mu.Lock()
				received[path] = now
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(received) != 300 {
		t.Fatalf("%d of 300 answered 201", len(received))
	}
	for path, got := range received {
		done := finished[path]
		covered := false
		for _, iv := range h.intervals {
			if !iv[0].Before(done) && !iv[1].After(got) {
				covered = true
				break
			}
		}
		if !covered {
			t.Fatalf("%s: finished at %v, received at %v, and no barrier started after the one and ended before the other", path, done, got)
		}
	}
	t.Logf("300 responses, %d barriers", len(h.intervals))
}
