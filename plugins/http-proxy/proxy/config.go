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
	UpstreamWait    time.Duration // upstream-wait: hold requests while the service refuses connections (30s)
	IdleTimeout     time.Duration // idle-timeout: close idle client connections (120s)
	HeaderTimeout   time.Duration // header-timeout: a client's time to send its request header (10s)
	BodyTimeout     time.Duration // body-timeout: a client's time to send its request body, before body-min-rate extends it (20s)
	BodyMinRate     int64         // body-min-rate: bytes a second that extend body-timeout (500; 0: none)
	MaxBody         int64         // max-body: largest request body; more gets 413 (64 MiB)
	SpoolMemory     int64         // spool-memory: bytes of a held body kept in memory (1 MiB)
	SpoolDisk       int64         // spool-disk: bytes of all spooled bodies on disk at once (1 GiB)
	Metrics         string        // metrics: address for Prometheus /metrics (off)
	MaxConns        int           // max-conns: client connections; more get 503 (from the fd limit)
	Procs           int           // procs: CPUs the proxy's Go code runs on at once (1; 0: the runtime's default)
	MonitorSlack    time.Duration // monitor-slack: timer slack of the Go runtime's monitor thread (1ms; 0: the kernel's)
	Routes          routes        // durability, sync=, none=
}

// keys are the configuration keys the proxy knows.
var keys = []string{"listen", "upstream", "pool", "barriers", "max-inflight", "queue-timeout", "barrier-timeout",
	"upstream-timeout", "upstream-wait", "idle-timeout", "header-timeout", "body-timeout", "body-min-rate", "max-body",
	"spool-memory", "spool-disk", "metrics", "max-conns", "durability", "sync", "none", "procs", "monitor-slack"}

// ParseConfig reads the plugin configuration.
func ParseConfig(c sdk.Config) (Config, error) {
	var cfg Config
	err := c.Only(keys...)
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
	for _, parse := range []func(sdk.Config, *Config) error{parseCounts, parseDurations, parseSizes, parseRest} {
		if err := parse(c, &cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

func parseCounts(c sdk.Config, cfg *Config) error {
	ints := []struct {
		key string
		dst *int
		def int
	}{{"pool", &cfg.Pool, 16}, {"max-inflight", &cfg.MaxInflight, 1024}, {"barriers", &cfg.Barriers, 1}}
	for _, i := range ints {
		var err error
		if *i.dst, err = c.Int(i.key, i.def); err != nil {
			return err
		}
		if *i.dst <= 0 {
			return fmt.Errorf("config: %s must be positive", i.key)
		}
	}
	return nil
}

func parseDurations(c sdk.Config, cfg *Config) error {
	durs := []struct {
		key string
		dst *time.Duration
		def time.Duration
	}{{"queue-timeout", &cfg.QueueTimeout, 5 * time.Second}, {"barrier-timeout", &cfg.BarrierTimeout, 10 * time.Second},
		{"upstream-timeout", &cfg.UpstreamTimeout, time.Minute}, {"upstream-wait", &cfg.UpstreamWait, 30 * time.Second},
		{"idle-timeout", &cfg.IdleTimeout, 2 * time.Minute}, {"header-timeout", &cfg.HeaderTimeout, 10 * time.Second},
		{"body-timeout", &cfg.BodyTimeout, 20 * time.Second}}
	for _, d := range durs {
		var err error
		if *d.dst, err = c.Duration(d.key, d.def); err != nil {
			return err
		}
		if *d.dst <= 0 {
			return fmt.Errorf("config: %s must be positive", d.key)
		}
	}
	return nil
}

// parseSizes reads the byte counts. A request body is spooled whole
// before it goes upstream, so max-body must fit in the half of
// spool-disk that request bodies may take.
func parseSizes(c sdk.Config, cfg *Config) error {
	sizes := []struct {
		key string
		dst *int64
		def int
		min int64
	}{{"spool-memory", &cfg.SpoolMemory, 1 << 20, 0}, {"spool-disk", &cfg.SpoolDisk, 1 << 30, 0},
		{"max-body", &cfg.MaxBody, 64 << 20, 1}, {"body-min-rate", &cfg.BodyMinRate, 500, 0}}
	for _, s := range sizes {
		n, err := c.Int(s.key, s.def)
		if err != nil {
			return err
		}
		if int64(n) < s.min {
			return fmt.Errorf("config: %s must be at least %d", s.key, s.min)
		}
		*s.dst = int64(n)
	}
	if cfg.MaxBody > cfg.SpoolMemory && cfg.MaxBody > cfg.SpoolDisk/2 {
		return fmt.Errorf("config: max-body=%d does not fit in the half of spool-disk=%d that request bodies may take: raise spool-disk to %d or lower max-body",
			cfg.MaxBody, cfg.SpoolDisk, 2*cfg.MaxBody)
	}
	return nil
}

func parseRest(c sdk.Config, cfg *Config) error {
	var err error
	if cfg.Procs, err = c.Int("procs", 1); err != nil {
		return err
	}
	if cfg.Procs < 0 {
		return fmt.Errorf("config: procs must be 0 (the runtime's default) or positive")
	}
	if cfg.MonitorSlack, err = c.Duration("monitor-slack", time.Millisecond); err != nil {
		return err
	}
	if cfg.MonitorSlack < 0 {
		return fmt.Errorf("config: monitor-slack must be 0 (the kernel's default) or positive")
	}
	cfg.Metrics = c.String("metrics", "")
	def, err := parseDurability(c.String("durability", "sync"))
	if err != nil {
		return err
	}
	cfg.Routes, err = parseRoutes(def, map[durability]string{durSync: c.String("sync", ""), durNone: c.String("none", "")})
	return err
}
