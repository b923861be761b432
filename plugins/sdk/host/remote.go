package host

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/internal/pluginpb"
	"github.com/pbfs/pbfs/plugins/sdk/internal/wire"
)

// ClientPlugin is the host side of go-plugin's Plugin: dispensing it
// yields a *Remote.
type ClientPlugin struct{ plugin.NetRPCUnsupportedPlugin }

// GRPCServer is never called on the host side.
func (ClientPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return fmt.Errorf("the pbfs host side serves no plugin")
}

// GRPCClient wraps the plugin's connection.
func (ClientPlugin) GRPCClient(_ context.Context, broker *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return &Remote{broker: broker, plugin: pluginpb.NewPluginClient(conn),
		frontend: pluginpb.NewFrontendClient(conn), hint: pluginpb.NewHintClient(conn)}, nil
}

// Remote calls a plugin's services.
type Remote struct {
	broker   *plugin.GRPCBroker
	plugin   pluginpb.PluginClient
	frontend pluginpb.FrontendClient
	hint     pluginpb.HintClient
	info     Info

	mu      sync.Mutex
	hostSrv *grpc.Server
	line    *line // the plugin's barrier line, when it was launched with one
}

// load reads the plugin's Info.
func (r *Remote) load(ctx context.Context, version int) error {
	in, err := r.plugin.Info(ctx, &pluginpb.InfoRequest{})
	if err != nil {
		return fmt.Errorf("info: %w", err)
	}
	r.info = Info{Name: in.Name, Version: in.Version, Kinds: in.Kinds, MTLS: in.Mtls, Protocol: version}
	return nil
}

// Info returns what the plugin said about itself.
func (r *Remote) Info() Info { return r.info }

// StartFrontend serves h to the plugin over the broker and starts it.
func (r *Remote) StartFrontend(ctx context.Context, name, volume string, cfg map[string]string, h sdk.Host) error {
	if !r.info.Serves(wire.KindFrontend) {
		return fmt.Errorf("start %s: %w: frontend", name, ErrKind)
	}
	id := r.broker.NextId()
	ready := make(chan *grpc.Server, 1)
	go r.broker.AcceptAndServe(id, func(opts []grpc.ServerOption) *grpc.Server {
		s := grpc.NewServer(opts...)
		pluginpb.RegisterHostServer(s, &hostServer{h: h})
		ready <- s
		return s
	})
	r.mu.Lock()
	r.hostSrv = <-ready
	r.mu.Unlock()
	if r.line != nil {
		r.line.serveHost(h)
	}
	if _, err := r.frontend.Start(ctx, &pluginpb.StartRequest{Name: name, Volume: volume, Config: cfg, HostBrokerId: id}); err != nil {
		return fmt.Errorf("start %s: %s", name, status.Convert(err).Message())
	}
	return nil
}

// StopFrontend asks the plugin to finish and stop, then stops serving
// the Host service to it.
func (r *Remote) StopFrontend(ctx context.Context) error {
	_, err := r.frontend.Stop(ctx, &pluginpb.StopRequest{})
	if r.line != nil {
		r.line.serveHost(nil) // after Stop: a stopping frontend still takes barriers
	}
	r.mu.Lock()
	if r.hostSrv != nil {
		r.hostSrv.Stop()
		r.hostSrv = nil
	}
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("stop: %s", status.Convert(err).Message())
	}
	return nil
}

// Rules asks a hint plugin for its rules.
func (r *Remote) Rules(ctx context.Context, name, volume string, cfg map[string]string) ([]sdk.Rule, error) {
	if !r.info.Serves(wire.KindHint) {
		return nil, fmt.Errorf("rules %s: %w: hint", name, ErrKind)
	}
	resp, err := r.hint.Rules(ctx, &pluginpb.RulesRequest{Name: name, Volume: volume, Config: cfg})
	if err != nil {
		return nil, fmt.Errorf("rules %s: %s", name, status.Convert(err).Message())
	}
	var out []sdk.Rule
	for _, rule := range resp.Rules {
		out = append(out, sdk.Rule{Pattern: rule.Pattern, Hint: hintFromPB(rule.Hint)})
	}
	return out, nil
}

// Validate asks the plugin whether cfg is a configuration it accepts; a
// plugin that does not validate accepts everything.
func (r *Remote) Validate(ctx context.Context, name string, cfg map[string]string) error {
	_, err := r.plugin.Validate(ctx, &pluginpb.ValidateRequest{Name: name, Config: cfg})
	if status.Code(err) == codes.Unimplemented || err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrConfig, status.Convert(err).Message())
}

// Check asks a hint plugin to grade the service's settings; a plugin
// that does not check anything has no findings.
func (r *Remote) Check(ctx context.Context, name, volume string, cfg map[string]string) ([]sdk.Finding, error) {
	if !r.info.Serves(wire.KindHint) {
		return nil, fmt.Errorf("check %s: %w: hint", name, ErrKind)
	}
	resp, err := r.hint.Check(ctx, &pluginpb.RulesRequest{Name: name, Volume: volume, Config: cfg})
	if status.Code(err) == codes.Unimplemented {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check %s: %s", name, status.Convert(err).Message())
	}
	var out []sdk.Finding
	for _, f := range resp.Findings {
		out = append(out, sdk.Finding{Severity: sdk.Severity(f.Severity), Setting: f.Setting, Value: f.Value, Message: f.Message})
	}
	return out, nil
}

// Classify asks a hint plugin about paths.
func (r *Remote) Classify(ctx context.Context, paths []string) ([]sdk.PathHint, error) {
	if !r.info.Serves(wire.KindHint) {
		return nil, fmt.Errorf("classify: %w: hint", ErrKind)
	}
	resp, err := r.hint.Classify(ctx, &pluginpb.ClassifyRequest{Paths: paths})
	if err != nil {
		return nil, fmt.Errorf("classify: %s", status.Convert(err).Message())
	}
	if len(resp.Hints) != len(paths) {
		return nil, fmt.Errorf("classify: %d hints for %d paths", len(resp.Hints), len(paths))
	}
	out := make([]sdk.PathHint, len(paths))
	for i, h := range resp.Hints {
		out[i] = hintFromPB(h)
	}
	return out, nil
}

func hintFromPB(h *pluginpb.PathHint) sdk.PathHint {
	if h == nil {
		return sdk.PathHint{}
	}
	return sdk.PathHint{LocalOnly: h.LocalOnly, Fsync: sdk.FsyncPolicy(h.Fsync), Reason: h.Reason}
}

// hostServer serves an sdk.Host to a plugin.
type hostServer struct {
	pluginpb.UnimplementedHostServer
	h sdk.Host
}

func (s *hostServer) Barrier(ctx context.Context, _ *pluginpb.BarrierRequest) (*pluginpb.BarrierResponse, error) {
	seq, err := s.h.Barrier(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &pluginpb.BarrierResponse{Seq: seq}, nil
}

func (s *hostServer) Status(ctx context.Context, _ *pluginpb.StatusRequest) (*pluginpb.StatusResponse, error) {
	st, err := s.h.Status(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	out := &pluginpb.StatusResponse{Volume: st.Volume, VolumeId: st.VolumeID, Epoch: st.Epoch, LastSeq: st.LastSeq, Capture: st.Capture}
	for _, b := range st.Backups {
		out.Backups = append(out.Backups, &pluginpb.BackupStatus{Addr: b.Addr, Up: b.Up, AckedSeq: b.AckedSeq, AppliedSeq: b.AppliedSeq, Stale: b.Stale})
	}
	return out, nil
}

// Dispense takes the plugin's Remote from an established go-plugin
// connection (Launch does this; so does sdktest, in-process).
func Dispense(ctx context.Context, rpc plugin.ClientProtocol, version int) (*Remote, error) {
	raw, err := rpc.Dispense(wire.PluginName)
	if err != nil {
		return nil, fmt.Errorf("dispense: %w", err)
	}
	r := raw.(*Remote)
	if err := r.load(ctx, version); err != nil {
		return nil, err
	}
	return r, nil
}
