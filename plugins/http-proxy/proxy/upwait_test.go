package proxy_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/testservice"
)

// The service comes up after the proxy: after a failover the new
// primary's proxy serves before the --on-promote hook has started the
// service. Requests that arrive meanwhile wait for it, within
// upstream-wait, and reach it in the order they came.

// orderedService records the order of the POSTs it acts on.
type orderedService struct {
	*testservice.Service
	mu    sync.Mutex
	order []string
}

func (s *orderedService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		s.mu.Lock()
		s.order = append(s.order, r.URL.Path)
		s.mu.Unlock()
	}
	s.Service.ServeHTTP(w, r)
}

// A proxy whose service comes up a second after it serves answers every
// request of that second 2xx (it answered 502 "dial upstream: connection
// refused"), each acted on once, in the order they arrived.
func TestServiceStartingLateIsWaitedFor(t *testing.T) {
	upstream := fstest.FreeAddr(t)
	// queue-timeout is shorter than the outage: upstream-wait bounds a
	// wait for a service that is not up, in the queue too.
	r := startTo(t, "pool=1,queue-timeout=200ms", upstream)
	svc := &orderedService{Service: &testservice.Service{Dir: t.TempDir()}}
	const n = 10
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}
			resp, err := c.Post(fmt.Sprintf("http://%s/kv/k%d", r.addr, i), "text/plain", strings.NewReader(fmt.Sprint("v", i)))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
		time.Sleep(100 * time.Millisecond) // queued in this order
	}
	ln, err := net.Listen("tcp", upstream)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: svc}
	go srv.Serve(ln)
	defer srv.Close()
	wg.Wait()
	for i, code := range codes {
		if code != http.StatusCreated {
			t.Fatalf("request %d, made while the service was not up yet: %d (all: %v)", i, code, codes)
		}
	}
	if svc.Posts.Load() != n {
		t.Fatalf("the service acted on %d POSTs of %d", svc.Posts.Load(), n)
	}
	for i, path := range svc.order {
		if want := fmt.Sprintf("/kv/k%d", i); path != want {
			t.Fatalf("the service got %v, not in the order they came", svc.order)
		}
	}
	if got := fetch(t, r.addr, "k9"); got != "v9" {
		t.Fatalf("the service holds %q", got)
	}
}

// Past upstream-wait a request for a service that is still not up gets
// 503 with Retry-After, saying nothing reached the service: not 502.
func TestServiceNotUpIs503(t *testing.T) {
	r := startTo(t, "upstream-wait=1s", fstest.FreeAddr(t))
	began := time.Now()
	resp, err := http.Post("http://"+r.addr+"/kv/k", "text/plain", strings.NewReader("v"))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(began)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(msg), "nothing reached it") {
		t.Fatalf("a service that never came up: %d %q after %v", resp.StatusCode, msg, took)
	}
	if took < time.Second || took > 5*time.Second {
		t.Fatalf("answered after %v; upstream-wait is 1s", took)
	}
	if n := r.metric(t, "pbfs_proxy_shed_total", `reason="upstream-down"`); n != 1 {
		t.Fatalf("shed{upstream-down} = %v", n)
	}
}
