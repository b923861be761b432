package coord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/plugins/sdk/host"
)

// Clients need not know which node is the primary. Every node's frontend
// address (the http-proxy plugin's listen address, Config.Proxy) answers:
// the primary's plugin serves it, and while a node is a backup, pbfs node
// itself listens there and forwards each request to the primary's
// frontend, as etcd names it (LiteFS's proxy forwards writes the same
// way). After a failover the same address keeps working once the new
// primary serves. While no primary serves, or the new one's frontend does
// not listen yet, a request waits for one (waitingTransport), within the
// http-proxy plugin's upstream-wait. A request is never sent twice once a
// primary may have seen it: a POST forwarded to a primary that died may or
// may not have run, and only its client can tell.

// forwarder forwards requests to the current primary's frontend.
type forwarder struct {
	n   *Node
	srv *http.Server

	mu       sync.Mutex
	target   string // the primary's frontend, host:port
	at       time.Time
	released bool // the address is the plugin's now: this node may be the primary
}

// forwardFresh is how long a looked-up primary is trusted before etcd is
// asked again (and at once after a failed forward).
const forwardFresh = 500 * time.Millisecond

// startForwarding listens on the frontend address while this node is a
// backup; stop releases the address at once (for the plugin, on
// promotion). The requests still being forwarded finish on their own,
// within the wait: one that waits for a primary may get this very node,
// whose plugin then serves it. Had stop waited for them, a promotion
// waited as long, and the new primary's lease could expire meanwhile.
func (n *Node) startForwarding() (stop func(), err error) {
	if n.cfg.Proxy == "" {
		return func() {}, nil
	}
	ln, err := net.FileListener(n.front) // a copy: closing it leaves the socket listening
	if err != nil {
		return nil, err
	}
	f := &forwarder{n: n}
	wait := n.forwardWait()
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: "http", Host: f.primary(r.In.Context())})
			r.SetXForwarded()
			r.Out.Header.Set("Via", "1.1 pbfs-node-"+n.cfg.Name)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.forget()
			w.Header().Set("Retry-After", "1")
			msg := fmt.Sprintf("pbfs node %s: no primary reachable to forward to within %v (%v)", n.cfg.Name, wait, err)
			if !errors.Is(err, errNoPrimary) && !errors.Is(err, syscall.ECONNREFUSED) && !replayable(r) && r.Context().Err() == nil {
				msg = fmt.Sprintf("pbfs node %s: the primary was lost while it had this request (%v): it may or may not have been applied, so it is not sent again; "+
					"a request with an Idempotency-Key header, or of an idempotent method, would have been", n.cfg.Name, err)
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
		},
		Transport: &waitingTransport{f: f, base: http.DefaultTransport, wait: wait},
	}
	f.srv = &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go f.srv.Serve(ln)
	n.log.Info("forwarding the frontend to the primary", "listen", n.cfg.Proxy)
	return func() {
		f.mu.Lock()
		f.released, f.target = true, ""
		f.mu.Unlock()
		ln.Close()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
			defer cancel()
			f.srv.Shutdown(ctx)
		}()
	}, nil
}

// listenFront opens the frontend address's socket, which listens for as
// long as the node runs: while the role changes, no process accepts from
// it for a moment, and clients' connections wait in its queue instead of
// being refused.
func listenFront(addr string) (*os.File, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer ln.Close() // the file is a copy
	return ln.(*net.TCPListener).File()
}

// frontPlugins is plugins with the frontend socket handed to the one that
// serves the frontend address.
func (n *Node) frontPlugins(plugins []host.Spec) []host.Spec {
	out := slices.Clone(plugins)
	for i := range out {
		if n.front != nil && out[i].Config["listen"] == n.cfg.Proxy {
			out[i].Listener, out[i].ListenAddr = n.front, n.cfg.Proxy
		}
	}
	return out
}

// errNoPrimary is what a forward finds while no primary serves.
var errNoPrimary = errors.New("no primary")

// primary returns the primary's frontend address, "" if none serves.
func (f *forwarder) primary(ctx context.Context) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.target != "" && time.Since(f.at) < forwardFresh {
		return f.target
	}
	resp, err := f.n.cli.Get(ctx, f.n.k.leader())
	f.target, f.at = "", time.Now()
	if err == nil && len(resp.Kvs) > 0 {
		var l Leader
		// This node as the leader: its own plugin, once the forwarder
		// released the address; before, that address is the forwarder.
		if json.Unmarshal(resp.Kvs[0].Value, &l) == nil && (l.Name != f.n.cfg.Name || f.released) {
			f.target = l.Proxy
		}
	}
	return f.target // "": no primary, the transport fails the request
}

// defaultForwardWait is the http-proxy plugin's default upstream-wait.
const defaultForwardWait = 30 * time.Second

// forwardWait is how long a forwarded request waits for a primary whose
// frontend accepts connections: the wait the primary's proxy gives its
// own service (the http-proxy plugin's upstream-wait).
func (n *Node) forwardWait() time.Duration {
	for _, p := range n.cfg.Mount.Plugins {
		if p.Name != "http-proxy" || p.Config["upstream-wait"] == "" {
			continue
		}
		if d, err := time.ParseDuration(p.Config["upstream-wait"]); err == nil && d > 0 {
			return d
		}
	}
	return defaultForwardWait
}

// waitingTransport forwards a request to the primary's frontend; while
// there is none (an election under way) or it refuses connections (the
// new primary's plugin not listening yet), it asks etcd again every
// forwardPoll and tries again, within wait. Nothing of a request reaches
// a frontend that refused the connection, so trying again is safe. A
// request that failed any other way (the primary was lost with it) may
// have run there: it is sent again only if it may be replayed (replayable),
// and answered 503 otherwise.
type waitingTransport struct {
	f    *forwarder
	base http.RoundTripper
	wait time.Duration
}

// forwardPoll is how often a waiting forward looks for a primary.
const forwardPoll = 50 * time.Millisecond

// maxReplayBody bounds the body a replayable request keeps to be sent again.
const maxReplayBody = 1 << 20

// replayable reports whether r may be sent again after a failure that
// could have reached the primary: an idempotent method (RFC 9110 9.2.2),
// or a request its client marked with an idempotency key.
func replayable(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return r.Header.Get("Idempotency-Key") != "" || r.Header.Get("X-Idempotency-Key") != ""
}

func (t *waitingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	deadline := time.Now().Add(t.wait)
	r = r.Clone(r.Context())
	if r.Body != nil {
		defer r.Body.Close()
	}
	replay := replayable(r)
	body, err := keepBody(r, &replay)
	if err != nil {
		return nil, err
	}
	for {
		err := errNoPrimary
		if r.URL.Host != "" {
			r.Body = body()
			resp, rerr := t.base.RoundTrip(r)
			if rerr == nil || !errors.Is(rerr, syscall.ECONNREFUSED) && !(replay && r.Context().Err() == nil) {
				return resp, rerr
			}
			err = rerr
		}
		t.f.forget()
		if time.Until(deadline) < forwardPoll || !sleep(r.Context(), forwardPoll) {
			return nil, err
		}
		r.URL.Host = t.f.primary(r.Context())
	}
}

// keepBody makes r's body readable once per try: kept in memory if r may
// be replayed and its declared length is small enough (replay is cleared
// if not), else the original, which a refused dial leaves unread.
func keepBody(r *http.Request, replay *bool) (func() io.ReadCloser, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return func() io.ReadCloser { return http.NoBody }, nil
	}
	if *replay && r.ContentLength >= 0 && r.ContentLength <= maxReplayBody {
		data, err := io.ReadAll(io.LimitReader(r.Body, maxReplayBody+1))
		if err != nil {
			return nil, err
		}
		if len(data) > maxReplayBody {
			return nil, errors.New("request body larger than its Content-Length")
		}
		return func() io.ReadCloser { return io.NopCloser(bytes.NewReader(data)) }, nil
	}
	*replay = false
	// A refused dial closes the body, read or not: keep it for the next
	// try (RoundTrip closes it once).
	orig := r.Body
	return func() io.ReadCloser { return io.NopCloser(orig) }, nil
}

func (f *forwarder) forget() {
	f.mu.Lock()
	f.target = ""
	f.mu.Unlock()
}
