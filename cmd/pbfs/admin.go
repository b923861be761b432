package main

import (
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/health"
	"github.com/pbfs/pbfs/replicate/wire"
)

// The admin listener (--admin ADDR on mount, promote, node and backup)
// serves the process's Prometheus metrics at /metrics, Go's profiler at
// /debug/pprof/, and liveness and readiness at /healthz and /readyz. It is off unless given. On a loopback address anyone on
// the machine may read it, as the control socket's metrics; on any other
// address every request must carry the replication token
// ("Authorization: Bearer TOKEN"), as the replication channel does, and
// pbfs refuses to start without one. With --tls-cert/--tls-key/--tls-ca it
// serves HTTPS and requires a client certificate, as replication does.

var adminFlag = &cli.StringFlag{Name: "admin", Usage: "serve Prometheus metrics (/metrics), pprof (/debug/pprof/), liveness (/healthz) and readiness (/readyz) at HOST:PORT; off a loopback address requests need the replication token (Authorization: Bearer TOKEN), except the status codes of /healthz and /readyz"}

// checkAdmin refuses an admin address that is malformed, or off loopback
// with no token to guard it.
func checkAdmin(addr, token string) error {
	if addr == "" {
		return nil
	}
	if err := checkListen(addr); err != nil {
		return fmt.Errorf("--admin: %w", err)
	}
	if !loopback(addr) && token == "" {
		return fmt.Errorf("--admin %s is not on loopback: give the replication token (--token, --token-file or PBFS_TOKEN) to guard it", addr)
	}
	return nil
}

func loopback(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// admin is an admin listener, listening before the process starts its
// work (so a taken address fails the start) and serving once it has
// something to report.
type admin struct {
	addr, token string
	ln          net.Listener
	srv         *http.Server
}

// listenAdmin listens at addr ("" for none); with TLS files, as the
// replication channel does, it serves HTTPS and requires a client
// certificate the CA signed.
func listenAdmin(addr, token string, tlsFiles wire.TLSFiles) (*admin, error) {
	a := &admin{addr: addr, token: token}
	if addr == "" {
		return a, nil
	}
	var cfg *tls.Config
	if tlsFiles.Enabled() {
		var err error
		if cfg, err = tlsFiles.ServerConfig(); err != nil {
			return nil, fmt.Errorf("admin listener: %w", err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	a.ln = ln
	return a, nil
}

// close stops serving.
func (a *admin) close() {
	switch {
	case a.srv != nil:
		a.srv.Close()
	case a.ln != nil:
		a.ln.Close()
	}
}

// serve serves g's metrics, with the gauges and the Go and process
// collectors of health.Collectors, pprof, /healthz and /readyz from src,
// and ev's state changes at /events, until close. Off loopback the health endpoints answer without the
// token (a load balancer reads the status code) but give their details
// only with it.
func (a *admin) serve(g prometheus.Gatherer, src health.Source, ev *events.Bus, log *slog.Logger) {
	if a.ln == nil {
		return
	}
	addr, ln, token := a.addr, a.ln, a.token
	own := prometheus.NewRegistry()
	own.MustRegister(health.Collectors(src, appVersion())...)
	guarded := http.NewServeMux()
	guarded.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{g, own}, promhttp.HandlerOpts{}))
	guarded.HandleFunc("GET /debug/pprof/", pprof.Index)
	guarded.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	guarded.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	guarded.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	guarded.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	if ev != nil {
		guarded.Handle("GET /events", ev)
	}
	mux := http.NewServeMux()
	open := loopback(addr)
	health.Handle(mux, src, func(r *http.Request) bool { return open || hasBearer(r, token) })
	if open {
		mux.Handle("/", guarded)
	} else {
		mux.Handle("/", bearer(token, guarded))
	}
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	go func() {
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener stopped", "err", err)
		}
	}()
	log.Info("admin listener: metrics, pprof, /healthz and /readyz", "addr", ln.Addr().String(), "authenticated", !open)
}

// adminToken is the token that guards an admin listener: the replication
// token if one is given, whether or not the command replicates.
func adminToken(c *cli.Context) string {
	t, _ := wire.LoadToken(c.String("token"), c.String("token-file"))
	return t
}

// bearer admits requests that carry token.
func bearer(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hasBearer(r, token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pbfs"`)
			http.Error(w, "the replication token is needed (Authorization: Bearer TOKEN)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hasBearer reports whether r carries token.
func hasBearer(r *http.Request, token string) bool {
	got := []byte(strings.TrimSpace(r.Header.Get("Authorization")))
	return token != "" && subtle.ConstantTimeCompare(got, []byte("Bearer "+token)) == 1
}
