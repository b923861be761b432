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
	"net/url"
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

// Config is the proxy's configuration, from the plugin's key=value pairs.
type Config struct {
	Listen          string        // listen: client address (required)
	Upstream        *url.URL      // upstream: the service, http://host:port (required)
	Pool            int           // pool: upstream connections (16)
	Barriers        int           // barriers: barriers in flight at once (1)
	MaxInflight     int           // max-inflight: requests admitted at once; more get 503 (1024)
	QueueTimeout    time.Duration // queue-timeout: wait for a pool slot before 503 (5s)
	BarrierTimeout  time.Duration // barrier-timeout: wait for a barrier before 503 (10s)
	UpstreamTimeout time.Duration // upstream-timeout: wait for upstream response headers (60s)
	IdleTimeout     time.Duration // idle-timeout: close idle client connections (120s)
	SpoolMemory     int64         // spool-memory: bytes of a held body kept in memory (1 MiB)
	Metrics         string        // metrics: address for Prometheus /metrics (off)
	MaxConns        int           // max-conns: client connections; more get 503 (from the fd limit)
	Procs           int           // procs: CPUs the proxy's Go code runs on at once (1; 0: the runtime's default)
	MonitorSlack    time.Duration // monitor-slack: timer slack of the Go runtime's monitor thread (1ms; 0: the kernel's)
	Routes          routes        // durability, sync=, none=
}

// ParseConfig reads the plugin configuration.
func ParseConfig(c sdk.Config) (Config, error) {
	var cfg Config
	err := c.Only("listen", "upstream", "pool", "barriers", "max-inflight", "queue-timeout", "barrier-timeout",
		"upstream-timeout", "idle-timeout", "spool-memory", "metrics", "max-conns", "durability", "sync", "none", "procs", "monitor-slack")
	if err != nil {
		return cfg, err
	}
	if cfg.Listen, err = c.Required("listen"); err != nil {
		return cfg, err
	}
	up, err := c.Required("upstream")
	if err != nil {
		return cfg, err
	}
	if cfg.Upstream, err = url.Parse(up); err != nil || cfg.Upstream.Scheme != "http" || cfg.Upstream.Host == "" {
		return cfg, fmt.Errorf("config: upstream=%q: want http://host:port", up)
	}
	if cfg.MaxConns, err = c.Int("max-conns", 0); err != nil {
		return cfg, err
	}
	ints := []struct {
		key string
		dst *int
		def int
	}{{"pool", &cfg.Pool, 16}, {"max-inflight", &cfg.MaxInflight, 1024}, {"barriers", &cfg.Barriers, 1}}
	for _, i := range ints {
		if *i.dst, err = c.Int(i.key, i.def); err != nil {
			return cfg, err
		}
		if *i.dst <= 0 {
			return cfg, fmt.Errorf("config: %s must be positive", i.key)
		}
	}
	durs := []struct {
		key string
		dst *time.Duration
		def time.Duration
	}{{"queue-timeout", &cfg.QueueTimeout, 5 * time.Second}, {"barrier-timeout", &cfg.BarrierTimeout, 10 * time.Second},
		{"upstream-timeout", &cfg.UpstreamTimeout, time.Minute}, {"idle-timeout", &cfg.IdleTimeout, 2 * time.Minute}}
	for _, d := range durs {
		if *d.dst, err = c.Duration(d.key, d.def); err != nil {
			return cfg, err
		}
		if *d.dst <= 0 {
			return cfg, fmt.Errorf("config: %s must be positive", d.key)
		}
	}
	if cfg.Procs, err = c.Int("procs", 1); err != nil {
		return cfg, err
	}
	if cfg.Procs < 0 {
		return cfg, fmt.Errorf("config: procs must be 0 (the runtime's default) or positive")
	}
	if cfg.MonitorSlack, err = c.Duration("monitor-slack", time.Millisecond); err != nil {
		return cfg, err
	}
	if cfg.MonitorSlack < 0 {
		return cfg, fmt.Errorf("config: monitor-slack must be 0 (the kernel's default) or positive")
	}
	mem, err := c.Int("spool-memory", 1<<20)
	if err != nil {
		return cfg, err
	}
	cfg.SpoolMemory = int64(mem)
	cfg.Metrics = c.String("metrics", "")
	def, err := parseDurability(c.String("durability", "sync"))
	if err != nil {
		return cfg, err
	}
	cfg.Routes, err = parseRoutes(def, map[durability]string{durSync: c.String("sync", ""), durNone: c.String("none", "")})
	return cfg, err
}

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
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	stopSlack := keepMonitorSlack(cfg.MonitorSlack, env.Logger)
	s := newState(cfg, env.Host, env.Logger)
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
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
