package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pbfs/pbfs/internal/status"
	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/internal/wire"
)

// Spec declares one plugin: `--plugin NAME=PATH` and its
// `--plugin-config NAME:key=value,...`.
type Spec struct {
	Name   string
	Path   string
	Config map[string]string
	// Listener, if set, is handed to the plugin as the listening socket
	// of ListenAddr (Options.Listener).
	Listener   *os.File
	ListenAddr string
}

// SupervisorConfig configures a Supervisor.
type SupervisorConfig struct {
	Specs    []Spec
	Volume   string
	Host     sdk.Host
	Options  Options
	Registry prometheus.Registerer
	// MinBackoff and MaxBackoff bound the wait between restarts; zero
	// means 250 ms and 30 s. A plugin that ran for a minute starts over
	// at the minimum.
	MinBackoff, MaxBackoff time.Duration
	// PingEvery is how often a running plugin is asked whether it is
	// alive (go-plugin's health check); one that has not answered for
	// Unresponsive is restarted. Zero means 5 s and 30 s.
	PingEvery, Unresponsive time.Duration
}

// Supervisor runs plugins, restarts them with backoff when they crash or
// fail to start, and stops them. Nothing a plugin does stops the host.
type Supervisor struct {
	cfg     SupervisorConfig
	log     *slog.Logger
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	status  map[string]*status.Plugin
	metrics *metrics
}

// Start launches every plugin in the background.
func Start(cfg SupervisorConfig) *Supervisor {
	cfg.Options = cfg.Options.withDefaults()
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 250 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(30*time.Second, cfg.MinBackoff)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Supervisor{cfg: cfg, log: cfg.Options.Logger, cancel: cancel, status: map[string]*status.Plugin{}, metrics: newMetrics(cfg.Registry)}
	for _, sp := range cfg.Specs {
		s.status[sp.Name] = &status.Plugin{Name: sp.Name, Path: sp.Path, State: status.PluginStarting, Since: time.Now()}
	}
	for _, sp := range cfg.Specs {
		s.wg.Add(1)
		go s.run(ctx, sp)
	}
	return s
}

// Close stops every plugin (frontends get Stop first, so they can finish
// what they hold) and waits for them.
func (s *Supervisor) Close() {
	s.cancel()
	s.wg.Wait()
}

// Status lists the plugins, in the order they were declared.
func (s *Supervisor) Status() []status.Plugin {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]status.Plugin, 0, len(s.cfg.Specs))
	for _, sp := range s.cfg.Specs {
		out = append(out, *s.status[sp.Name])
	}
	return out
}

// ruleShapes is rules as status reports them.
func ruleShapes(rules []sdk.Rule) []status.Rule {
	var out []status.Rule
	for _, r := range rules {
		out = append(out, status.Rule{Pattern: r.Pattern, Hint: status.PathHint{LocalOnly: r.Hint.LocalOnly, Fsync: int(r.Hint.Fsync), Reason: r.Hint.Reason}})
	}
	return out
}

func (s *Supervisor) update(name string, fn func(*status.Plugin)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.status[name])
}

func (s *Supervisor) run(ctx context.Context, sp Spec) {
	defer s.wg.Done()
	log := s.log.With("plugin", sp.Name)
	backoff := s.cfg.MinBackoff
	for ctx.Err() == nil {
		began := time.Now()
		err := s.once(ctx, sp, log)
		if ctx.Err() != nil {
			break
		}
		s.metrics.restarts.WithLabelValues(sp.Name).Inc()
		if time.Since(began) > time.Minute {
			backoff = s.cfg.MinBackoff
		}
		log.Error("plugin stopped; restarting it", "err", err, "in", backoff)
		s.update(sp.Name, func(st *status.Plugin) {
			st.State, st.Pid, st.LastError, st.Since = status.PluginRestarting, 0, err.Error(), time.Now()
			st.Restarts++
		})
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
	s.update(sp.Name, func(st *status.Plugin) { st.State, st.Pid, st.Since = status.PluginStopped, 0, time.Now() })
}

// once runs the plugin until it exits or ctx ends; it returns why it
// stopped.
func (s *Supervisor) once(ctx context.Context, sp Spec, log *slog.Logger) error {
	s.update(sp.Name, func(st *status.Plugin) { st.State, st.Since = status.PluginStarting, time.Now() })
	o := s.cfg.Options
	o.Logger, o.Listener, o.ListenAddr = log, sp.Listener, sp.ListenAddr
	p, err := Launch(ctx, sp.Path, o)
	if err != nil {
		return err
	}
	defer p.Kill()
	info := p.Info()
	var rules []sdk.Rule
	if info.Serves(wire.KindHint) {
		if rules, err = p.Remote().Rules(ctx, sp.Name, s.cfg.Volume, sp.Config); err != nil {
			return err
		}
		log.Info("hint rules", "rules", len(rules))
	}
	if info.Serves(wire.KindFrontend) {
		h := &countingHost{h: s.cfg.Host, name: sp.Name, m: s.metrics}
		if err := p.Remote().StartFrontend(ctx, sp.Name, s.cfg.Volume, sp.Config, h); err != nil {
			return err
		}
	}
	log.Info("plugin running", "pid", p.Pid(), "kinds", info.Kinds, "protocol", info.Protocol, "mtls", info.MTLS)
	s.update(sp.Name, func(st *status.Plugin) {
		st.State, st.Pid, st.Info, st.Rules, st.LastError, st.Since = status.PluginRunning, p.Pid(), status.PluginInfo(info), ruleShapes(rules), "", time.Now()
	})
	up := s.metrics.up.WithLabelValues(sp.Name)
	up.Set(1)
	defer up.Set(0)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	alive := s.watchAlive(ctx, p)
	for {
		select {
		case <-ctx.Done():
			if info.Serves(wire.KindFrontend) {
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := p.Remote().StopFrontend(sctx); err != nil {
					log.Warn("plugin stop", "err", err)
				}
				cancel()
			}
			return ctx.Err()
		case <-t.C:
			if p.Exited() {
				return errors.New("plugin process exited")
			}
		case err := <-alive:
			// A stopped or wedged plugin kept its state "running" and
			// pbfs_plugin_up 1 while it served nobody.
			s.metrics.unresponsive.WithLabelValues(sp.Name).Inc()
			log.Error("plugin unresponsive; killing and restarting it", "pid", p.Pid(), "err", err)
			syscall.Kill(p.Pid(), syscall.SIGKILL) // it would not answer a graceful stop
			return err
		}
	}
}

// watchAlive pings p every PingEvery, and sends an error once it has not
// answered for Unresponsive.
func (s *Supervisor) watchAlive(ctx context.Context, p *Plugin) <-chan error {
	every, limit := s.cfg.PingEvery, s.cfg.Unresponsive
	if every <= 0 {
		every = 5 * time.Second
	}
	if limit <= 0 {
		limit = 30 * time.Second
	}
	out := make(chan error, 1)
	go func() {
		last := time.Now()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			pctx, cancel := context.WithTimeout(ctx, every)
			err := p.Ping(pctx)
			cancel()
			switch {
			case ctx.Err() != nil:
				return
			case err == nil:
				last = time.Now()
			case time.Since(last) >= limit:
				out <- fmt.Errorf("no answer to a health check for %v: %w", time.Since(last).Round(time.Second), err)
				return
			}
		}
	}()
	return out
}

// countingHost counts and times a plugin's barriers.
type countingHost struct {
	h    sdk.Host
	name string
	m    *metrics
}

func (c *countingHost) Barrier(ctx context.Context) (uint64, error) {
	t := time.Now()
	seq, err := c.h.Barrier(ctx)
	result := "ok"
	if err != nil {
		result = "error"
	}
	c.m.barriers.WithLabelValues(c.name, result).Inc()
	c.m.barrierSeconds.WithLabelValues(c.name).Observe(time.Since(t).Seconds())
	if err != nil {
		return 0, fmt.Errorf("barrier for plugin %s: %w", c.name, err)
	}
	return seq, nil
}

func (c *countingHost) Status(ctx context.Context) (sdk.Status, error) { return c.h.Status(ctx) }
