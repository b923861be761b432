// Package sdktest serves a plugin in-process for tests, over the same
// gRPC protocol (and the same SDK and host code) pbfs uses with a real
// plugin process, and offers a scriptable Host to stand in for pbfs.
package sdktest

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/host"
	"github.com/pbfs/pbfs/plugins/sdk/internal/wire"
)

// both is the in-process plugin: the SDK's server side and the host's
// client side of one protocol.
type both struct {
	plugin.NetRPCUnsupportedPlugin
	server plugin.GRPCPlugin
}

func (b both) GRPCServer(br *plugin.GRPCBroker, s *grpc.Server) error {
	return b.server.GRPCServer(br, s)
}

func (b both) GRPCClient(ctx context.Context, br *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return host.ClientPlugin{}.GRPCClient(ctx, br, c)
}

// Plugin is a plugin served in-process, seen from the host's side.
type Plugin struct {
	t      testing.TB
	remote *host.Remote
	mu     sync.Mutex
	start  bool
}

// Serve serves impl (an sdk.Frontend, sdk.Hint or both) in-process and
// connects to it as pbfs would. Everything is torn down in t.Cleanup.
func Serve(t testing.TB, impl any) *Plugin {
	t.Helper()
	srv, err := wire.ServerPlugin(impl, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	client, server := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{wire.PluginName: both{server: srv.(plugin.GRPCPlugin)}})
	remote, err := host.Dispense(context.Background(), client, sdk.ProtocolVersion)
	if err != nil {
		t.Fatal(err)
	}
	p := &Plugin{t: t, remote: remote}
	t.Cleanup(func() {
		p.mu.Lock()
		started := p.start
		p.mu.Unlock()
		if started {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = remote.StopFrontend(ctx)
			cancel()
		}
		// Stop the server before the client: closing the client asks the
		// server to stop too, and two concurrent Stops race in go-plugin.
		server.Stop()
		client.Close()
	})
	return p
}

// Info is what the plugin says about itself.
func (p *Plugin) Info() host.Info { return p.remote.Info() }

// StartFrontend starts the plugin as a frontend named name with cfg,
// calling back into h.
func (p *Plugin) StartFrontend(ctx context.Context, name string, cfg sdk.Config, h sdk.Host) error {
	if err := p.remote.StartFrontend(ctx, name, "", cfg, h); err != nil {
		return err
	}
	p.mu.Lock()
	p.start = true
	p.mu.Unlock()
	return nil
}

// StopFrontend stops it.
func (p *Plugin) StopFrontend(ctx context.Context) error {
	p.mu.Lock()
	p.start = false
	p.mu.Unlock()
	return p.remote.StopFrontend(ctx)
}

// Rules asks the plugin for its hint rules for volume.
func (p *Plugin) Rules(ctx context.Context, name, volume string, cfg sdk.Config) ([]sdk.Rule, error) {
	return p.remote.Rules(ctx, name, volume, cfg)
}

// Classify asks the plugin about paths.
func (p *Plugin) Classify(ctx context.Context, paths []string) ([]sdk.PathHint, error) {
	return p.remote.Classify(ctx, paths)
}

// Host is a scriptable sdk.Host: every Barrier returns the next seq after
// Delay, or Err when set.
type Host struct {
	mu       sync.Mutex
	seq      uint64
	barriers int
	delay    time.Duration
	err      error
	status   sdk.Status
}

var _ sdk.Host = (*Host)(nil)

// NewHost returns a Host whose barriers succeed at once.
func NewHost() *Host { return &Host{} }

// SetDelay makes each barrier take d (or until its context ends).
func (h *Host) SetDelay(d time.Duration) { h.mu.Lock(); h.delay = d; h.mu.Unlock() }

// SetErr makes barriers fail with err (nil: succeed again).
func (h *Host) SetErr(err error) { h.mu.Lock(); h.err = err; h.mu.Unlock() }

// SetStatus sets what Status returns.
func (h *Host) SetStatus(st sdk.Status) { h.mu.Lock(); h.status = st; h.mu.Unlock() }

// Barriers counts the barriers asked for so far.
func (h *Host) Barriers() int { h.mu.Lock(); defer h.mu.Unlock(); return h.barriers }

// Barrier implements sdk.Host.
func (h *Host) Barrier(ctx context.Context) (uint64, error) {
	h.mu.Lock()
	h.barriers++
	d, err := h.delay, h.err
	h.mu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	return h.seq, nil
}

// Status implements sdk.Host.
func (h *Host) Status(context.Context) (sdk.Status, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.status, nil
}
