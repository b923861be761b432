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

	"github.com/pbfs/pbfs/replicate"
)

// The admin listener (--admin ADDR on mount, promote, node and backup)
// serves the process's Prometheus metrics at /metrics and Go's profiler at
// /debug/pprof/. It is off unless given. On a loopback address anyone on
// the machine may read it, as the control socket's metrics; on any other
// address every request must carry the replication token
// ("Authorization: Bearer TOKEN"), as the replication channel does, and
// pbfs refuses to start without one. With --tls-cert/--tls-key/--tls-ca it
// serves HTTPS and requires a client certificate, as replication does.

var adminFlag = &cli.StringFlag{Name: "admin", Usage: "serve Prometheus metrics (/metrics) and pprof (/debug/pprof/) at HOST:PORT; off a loopback address requests need the replication token (Authorization: Bearer TOKEN)"}

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
func listenAdmin(addr, token string, tlsFiles replicate.TLSFiles) (*admin, error) {
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

// serve serves g's metrics and pprof until close.
func (a *admin) serve(g prometheus.Gatherer, log *slog.Logger) {
	if a.ln == nil {
		return
	}
	addr, ln, token := a.addr, a.ln, a.token
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	var h http.Handler = mux
	if !loopback(addr) {
		h = bearer(token, mux)
	}
	a.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	go func() {
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener stopped", "err", err)
		}
	}()
	log.Info("admin listener: metrics and pprof", "addr", ln.Addr().String(), "authenticated", !loopback(addr))
}

// adminToken is the token that guards an admin listener: the replication
// token if one is given, whether or not the command replicates.
func adminToken(c *cli.Context) string {
	t, _ := replicate.LoadToken(c.String("token"), c.String("token-file"))
	return t
}

// bearer admits requests that carry token.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(strings.TrimSpace(r.Header.Get("Authorization")))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pbfs"`)
			http.Error(w, "the replication token is needed (Authorization: Bearer TOKEN)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
