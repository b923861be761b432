// Package host is the pbfs side of the plugin protocol: it starts a plugin
// binary (go-plugin, gRPC, AutoMTLS), checks its handshake and protocol
// version, serves the Host service a frontend calls back, asks hint
// plugins for their rules, and supervises plugins (restart with backoff).
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/internal/wire"
)

var (
	// ErrHandshake: the binary is not a pbfs plugin, or exited before it
	// completed the handshake.
	ErrHandshake = errors.New("plugin handshake failed (not a pbfs plugin, or it exited at start)")
	// ErrVersion: the plugin speaks a protocol version this host does not.
	ErrVersion = errors.New("plugin protocol version not supported")
	// ErrKind: the plugin does not serve what it was asked for.
	ErrKind = errors.New("plugin does not serve this kind")
	// ErrConfig: the plugin refused its configuration.
	ErrConfig = errors.New("plugin refused its configuration")
)

// Options tune how plugins are launched.
type Options struct {
	Logger *slog.Logger
	// LogLevel is the level the plugin logs at (debug, info, ...).
	LogLevel string
	// Version is the host's protocol version; zero means the SDK's.
	Version int
	// StartTimeout bounds the handshake; zero means 10 s.
	StartTimeout time.Duration
	// Listener, if set, is a listening socket the plugin inherits and
	// serves ListenAddr from (sdk.Listen), instead of listening itself.
	Listener   *os.File
	ListenAddr string
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Version == 0 {
		o.Version = sdk.ProtocolVersion
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	return o
}

// Info describes a launched plugin.
type Info struct {
	Name     string   `json:"name,omitempty"`
	Version  string   `json:"version,omitempty"`
	Kinds    []string `json:"kinds"`
	MTLS     bool     `json:"mtls"`
	Protocol int      `json:"protocol"` // the negotiated protocol version
}

// Serves reports whether the plugin serves kind (wire.KindFrontend, ...).
func (i Info) Serves(kind string) bool {
	for _, k := range i.Kinds {
		if k == kind {
			return true
		}
	}
	return false
}

// Plugin is one running plugin process.
type Plugin struct {
	client  *plugin.Client
	remote  *Remote
	pid     int
	sockets string // the directory the plugin's socket is in; Kill removes it
	line    *line  // the plugin's barrier line (nil: barriers go over gRPC)
	// gone: the process never completed its handshake or has exited, so
	// go-plugin's "failed to exit gracefully" as Kill reaps it says
	// nothing (the launch error or the exit was logged).
	gone *atomic.Bool
}

// Launch starts the plugin binary at path and completes the handshake.
// The caller must Kill it.
func Launch(ctx context.Context, path string, o Options) (*Plugin, error) {
	o = o.withDefaults()
	// The plugin listens on a Unix socket that go-plugin removes only when
	// Serve returns; a plugin that crashed, was killed or left with its host
	// would leave it in the temp directory for good. So each launch gets a
	// directory of its own, and Kill removes it.
	sockets, err := os.MkdirTemp("", "pbfs-plugin-")
	if err != nil {
		return nil, fmt.Errorf("launch %s: %w", path, err)
	}
	cmd := exec.Command(path)
	// The plugin inherits the host's environment, except a socket
	// directory the host may itself have been given: go-plugin would
	// append the host's after ours, and the later one wins.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, plugin.EnvUnixSocketDir+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PBFS_PLUGIN_LOG_LEVEL="+o.LogLevel, plugin.EnvUnixSocketDir+"="+sockets)
	// The barrier line (line.go). Without one (no descriptors left, say)
	// the plugin's barriers go over gRPC, slower but the same.
	lineConn, lineEnd, err := wire.LinePair()
	if err != nil {
		o.Logger.Warn("plugin barriers will go over gRPC", "plugin", path, "err", err)
	} else {
		cmd.ExtraFiles = []*os.File{lineEnd}
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", wire.EnvLine, wire.LineFD))
	}
	if o.Listener != nil {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", wire.EnvListenFD, 3+len(cmd.ExtraFiles)), wire.EnvListenAddr+"="+o.ListenAddr)
		cmd.ExtraFiles = append(cmd.ExtraFiles, o.Listener)
	}
	gone := new(atomic.Bool)
	versions := map[int]plugin.PluginSet{}
	for _, v := range wire.Accepted(o.Version) {
		versions[v] = plugin.PluginSet{wire.PluginName: &ClientPlugin{}}
	}
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake(o.Version),
		VersionedPlugins: versions,
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     o.StartTimeout,
		Logger:           wire.HCLogDropping(o.Logger, func(msg string) bool { return gone.Load() && msg == "plugin failed to exit gracefully" }),
	})
	p := &Plugin{client: c, sockets: sockets, gone: gone}
	rpc, err := c.Client()
	if lineEnd != nil {
		lineEnd.Close() // the plugin has its own copy, if it started
	}
	if lineConn != nil {
		p.line = newLine(lineConn, o.Logger)
	}
	if err != nil {
		gone.Store(true)
		p.Kill()
		return nil, launchError(path, err)
	}
	if p.remote, err = Dispense(ctx, rpc, c.NegotiatedVersion()); err != nil {
		p.Kill()
		return nil, fmt.Errorf("launch %s: %w", path, err)
	}
	p.remote.line = p.line
	if rc := c.ReattachConfig(); rc != nil {
		p.pid = rc.Pid
	}
	return p, nil
}

// launchError names what went wrong in go-plugin's terms of ours.
func launchError(path string, err error) error {
	msg := err.Error()
	if first, _, ok := strings.Cut(msg, "\n"); ok {
		// go-plugin explains a silent plugin at length; keep its verdict.
		msg = strings.TrimSuffix(strings.TrimSpace(first), ":") + " (it printed no handshake on stdout)"
	}
	switch {
	case strings.Contains(msg, "incompatible API version"):
		return fmt.Errorf("launch %s: %w: %s", path, ErrVersion, msg)
	case strings.Contains(msg, "exited before we could connect"),
		strings.Contains(msg, "Unrecognized remote plugin message"),
		strings.Contains(msg, "timeout while waiting for plugin to start"),
		strings.Contains(msg, "unsupported plugin protocol"):
		return fmt.Errorf("launch %s: %w: %s", path, ErrHandshake, msg)
	}
	return fmt.Errorf("launch %s: %s", path, msg)
}

// Info returns what the plugin said about itself at launch.
func (p *Plugin) Info() Info { return p.remote.info }

// Pid is the plugin process's id.
func (p *Plugin) Pid() int { return p.pid }

// Ping asks the plugin whether it is alive (go-plugin's health check),
// waiting at most until ctx ends: a stopped process accepts the call and
// never answers.
func (p *Plugin) Ping(ctx context.Context) error {
	rpc, err := p.client.Client()
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- rpc.Ping() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Exited reports whether the plugin process has exited.
func (p *Plugin) Exited() bool { return p.client.Exited() }

// Remote is the protocol view of the plugin.
func (p *Plugin) Remote() *Remote { return p.remote }

// killGrace is how long Kill waits for go-plugin's graceful stop.
const killGrace = 5 * time.Second

// Kill stops the process (gracefully first, as go-plugin does) and removes
// its socket directory. go-plugin's graceful stop is an RPC without a
// deadline: a stopped or wedged plugin never answers it, and Kill (and a
// mount's stop with it) waited forever. After killGrace the process is
// killed, which fails the RPC.
func (p *Plugin) Kill() {
	if p.client.Exited() {
		p.gone.Store(true)
	}
	done := make(chan struct{})
	go func() {
		p.client.Kill()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(killGrace):
		if p.pid > 0 {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
		<-done
	}
	if p.line != nil {
		p.line.close()
	}
	os.RemoveAll(p.sockets)
}

// Check launches the plugin at path, completes the handshake and version
// check, reads its Info and stops it: what `pbfs plugin check` does.
func Check(ctx context.Context, path string, o Options) (Info, error) {
	p, err := Launch(ctx, path, o)
	if err != nil {
		return Info{}, err
	}
	defer p.Kill()
	return p.Info(), nil
}
