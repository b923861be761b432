package coord

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// Clients need not know which node is the primary. Every node's frontend
// address (the http-proxy plugin's listen address, Config.Proxy) answers:
// the primary's plugin serves it, and while a node is a backup, pbfs node
// itself listens there and forwards each request to the primary's
// frontend, as etcd names it (LiteFS's proxy forwards writes the same
// way). After a failover the same address keeps working once the new
// primary serves. A request is never retried: a POST forwarded to a
// primary that died may or may not have run, and only its client can tell.

// forwarder forwards requests to the current primary's frontend.
type forwarder struct {
	n   *Node
	srv *http.Server

	mu     sync.Mutex
	target string // the primary's frontend, host:port
	at     time.Time
}

// forwardFresh is how long a looked-up primary is trusted before etcd is
// asked again (and at once after a failed forward).
const forwardFresh = 500 * time.Millisecond

// startForwarding listens on the frontend address while this node is a
// backup; stop releases the address (for the plugin, on promotion).
func (n *Node) startForwarding() (stop func(), err error) {
	if n.cfg.Proxy == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", n.cfg.Proxy)
	if err != nil {
		return nil, err
	}
	f := &forwarder{n: n}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: "http", Host: f.primary(r.In.Context())})
			r.SetXForwarded()
			r.Out.Header.Set("Via", "1.1 pbfs-node-"+n.cfg.Name)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.forget()
			w.Header().Set("Retry-After", "1")
			http.Error(w, "pbfs node "+n.cfg.Name+": no primary reachable to forward to ("+err.Error()+")", http.StatusServiceUnavailable)
		},
	}
	rp.Transport = noPrimaryTransport{http.DefaultTransport}
	f.srv = &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go f.srv.Serve(ln)
	n.log.Info("forwarding the frontend to the primary", "listen", n.cfg.Proxy)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.srv.Shutdown(ctx)
	}, nil
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
		if json.Unmarshal(resp.Kvs[0].Value, &l) == nil && l.Name != f.n.cfg.Name {
			f.target = l.Proxy
		}
	}
	return f.target // "": no primary, the transport fails the request
}

// noPrimaryTransport fails a request with no primary to go to at once.
type noPrimaryTransport struct{ http.RoundTripper }

func (t noPrimaryTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == "" {
		return nil, errNoPrimary
	}
	return t.RoundTripper.RoundTrip(r)
}

func (f *forwarder) forget() {
	f.mu.Lock()
	f.target = ""
	f.mu.Unlock()
}
