// Package proxy is the HTTP frontend plugin's engine: a reverse proxy
// with output commit (responses held until a barrier covers them, shared
// among all responses waiting at that moment), a bounded keep-alive
// upstream pool, per-route durability, and load shedding that keeps it
// serving when file descriptors or ports run out.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/pbfs/pbfs/internal/timerslack"
	"github.com/pbfs/pbfs/plugins/sdk"
)

const (
	maxHeaderBytes = 64 << 10 // a request's header block, clients' and scrapers'
	metricsConns   = 8        // open connections to the metrics listener
)

// Proxy is the plugin. It implements sdk.Frontend.
type Proxy struct {
	mu      sync.Mutex
	srv     *http.Server
	metrics *http.Server
	done    chan struct{}
	state   *state
	slack   func() // stops the monitor's timer slack keeper
}

// Validate checks a configuration without starting (sdk.Validator).
func (p *Proxy) Validate(c sdk.Config) error {
	_, err := ParseConfig(c)
	return err
}

// New returns an unstarted proxy.
func New() *Proxy { return &Proxy{} }

// Info names the plugin.
func (p *Proxy) Info() sdk.Info { return sdk.Info{Name: "http-proxy", Version: "1.0.0"} }

// Start listens and serves; it returns once the listener is open.
func (p *Proxy) Start(_ context.Context, env sdk.Env) error {
	cfg, err := ParseConfig(env.Config)
	if err != nil {
		return err
	}
	cfg.MaxConns = maxClientConns(cfg.MaxConns, cfg.Pool)
	if cfg.Procs > 0 {
		// One P serves a proxy's goroutines best on small machines:
		// a released response, its connection's goroutine and the
		// barrier loop hand off on one thread instead of waking another
		// (docs/PLUGINS.md measures it).
		runtime.GOMAXPROCS(cfg.Procs)
	}
	ln, err := sdk.Listen(cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	stopSlack := keepMonitorSlack(cfg.MonitorSlack, env.Logger)
	s := newState(cfg, env.Host, env.Logger)
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: cfg.HeaderTimeout,
		ConnContext:       connContext,
		// Go's 1 MiB default let each request hold about 2 MiB: 600 such
		// clients took the proxy past 1 GiB. 64 KiB is several times what
		// nginx and Apache accept by default.
		MaxHeaderBytes: maxHeaderBytes,
		IdleTimeout:    cfg.IdleTimeout,
		ErrorLog:       slog.NewLogLogger(env.Logger.Handler(), slog.LevelDebug),
		ConnState:      s.connState,
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cfg.Metrics != "" {
		mln, err := net.Listen("tcp", cfg.Metrics)
		if err != nil {
			ln.Close()
			stopSlack()
			return fmt.Errorf("listen metrics %s: %w", cfg.Metrics, err)
		}
		// Bounded, so scrapers cannot take the descriptors the clients
		// need: a few connections, none kept idle for long.
		p.metrics = &http.Server{Handler: promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: maxHeaderBytes}
		go p.metrics.Serve(netutil.LimitListener(mln, metricsConns))
	}
	p.srv, p.state, p.done, p.slack = srv, s, make(chan struct{}), stopSlack
	go func() {
		defer close(p.done)
		if err := srv.Serve(newListener(ln, cfg.MaxConns, env.Logger, s.m)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			env.Logger.Error("proxy stopped serving", "err", err)
		}
	}()
	env.Logger.Info("http proxy serving", "listen", ln.Addr().String(), "upstream", cfg.Upstream.String(),
		"pool", cfg.Pool, "max_inflight", cfg.MaxInflight, "max_conns", cfg.MaxConns, "procs", runtime.GOMAXPROCS(0))
	return nil
}

// Stop stops accepting, lets held responses finish (within ctx) and
// closes the upstream pool.
func (p *Proxy) Stop(ctx context.Context) error {
	p.mu.Lock()
	srv, msrv, s, done, slack := p.srv, p.metrics, p.state, p.done, p.slack
	p.srv, p.metrics = nil, nil
	p.mu.Unlock()
	if srv == nil {
		return nil
	}
	defer slack()
	s.gate.close() // requests waiting for the service get 503 now
	err := srv.Shutdown(ctx)
	<-done
	if msrv != nil {
		msrv.Close()
	}
	s.transport.CloseIdleConnections()
	return err
}

// newReverseProxy forwards to the upstream; the state's hooks hold
// responses and map failures.
func newReverseProxy(s *state) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(s.cfg.Upstream)
			pr.SetXForwarded()
			if pr.In.Host == "" { // HTTP/1.0 without Host: say nothing, not ""
				pr.Out.Header.Del("X-Forwarded-Host")
			}
			pr.Out.Host = pr.In.Host
		},
		Transport:      s.transport,
		ModifyResponse: s.hold,
		ErrorHandler:   s.fail,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// keepMonitorSlack gives the Go runtime's monitor thread a timer slack of
// d (none when d is 0) until the returned stop is called. The monitor
// polls every 20 µs while the proxy serves; with 1 ms it woke half as
// often and the proxy spent a third less CPU per answer under WordPress
// (docs/PERFORMANCE.md). Without CAP_SYS_NICE it logs and does nothing.
func keepMonitorSlack(d time.Duration, log *slog.Logger) (stop func()) {
	if d <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		timerslack.KeepMonitor(ctx, d, time.Second, log)
	}()
	return func() { cancel(); <-done }
}
