package proxy

import (
	"fmt"
	"net/url"
	"time"

	"github.com/pbfs/pbfs/plugins/sdk"
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
