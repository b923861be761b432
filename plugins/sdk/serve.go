package sdk

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/plugins/sdk/internal/pluginpb"
	"github.com/pbfs/pbfs/plugins/sdk/internal/wire"
)

func init() { wire.ServerPlugin = newServerPlugin }

// Serve runs impl as a pbfs plugin until the host stops it. impl must
// implement Frontend, Hint or both, and may implement Describer. It is
// all a plugin's main needs to call; run by hand, the binary explains
// that only pbfs can start it and exits.
func Serve(impl any) {
	// The host reads this process's stderr as its log (go-plugin later
	// redirects os.Stderr itself, so keep the original).
	log := newLogger(os.Stderr, levelFromEnv(os.Getenv("PBFS_PLUGIN_LOG_LEVEL")))
	slog.SetDefault(log)
	// The host stops its plugins itself (Stop, then a kill), after they
	// finished what they hold; a service manager's SIGTERM to the whole
	// process group must not end the plugin first. (go-plugin already
	// ignores SIGINT.) And a plugin must not outlive its host.
	signal.Ignore(syscall.SIGTERM)
	// Nor may a log line to a host that died kill the plugin on the spot
	// (SIGPIPE on stderr): exitWithParent ends it, after removing the
	// socket directory the host can no longer remove.
	signal.Ignore(syscall.SIGPIPE)
	go exitWithParent(log)
	p, err := newServerPlugin(impl, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pbfs plugin:", err)
		os.Exit(2)
	}
	p.(*serverPlugin).line = openLine(log)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  wire.Handshake(ProtocolVersion),
		VersionedPlugins: map[int]plugin.PluginSet{ProtocolVersion: {wire.PluginName: p}},
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger:           wire.HCLog(log),
	})
}

// exitWithParent ends the plugin once the host that started it is gone
// (killed, crashed): nothing it holds can be released without barriers,
// and it would keep its listeners from a restarted host's new plugin.
func exitWithParent(log *slog.Logger) {
	parent := os.Getppid()
	for range time.Tick(250 * time.Millisecond) {
		if os.Getppid() != parent {
			log.Error("the pbfs host is gone; exiting")
			// The host made the socket directory for this plugin alone
			// and can no longer remove it. Only a directory of that name:
			// a plugin started by another host may have been given a
			// shared one.
			if dir := os.Getenv(plugin.EnvUnixSocketDir); strings.HasPrefix(filepath.Base(dir), "pbfs-plugin-") {
				os.RemoveAll(dir)
			}
			os.Exit(1)
		}
	}
}

// serverPlugin is the plugin side of go-plugin's Plugin.
type serverPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl     any
	frontend Frontend
	hint     Hint
	log      *slog.Logger
	line     *lineClient // the host's barrier line (line.go); nil: barriers over gRPC
}

func newServerPlugin(impl any, log *slog.Logger) (plugin.Plugin, error) {
	p := &serverPlugin{impl: impl, log: log}
	p.frontend, _ = impl.(Frontend)
	p.hint, _ = impl.(Hint)
	if p.frontend == nil && p.hint == nil {
		return nil, fmt.Errorf("serve: %T implements neither sdk.Frontend nor sdk.Hint", impl)
	}
	return p, nil
}

func (p *serverPlugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	pluginpb.RegisterPluginServer(s, &infoServer{p: p})
	if p.frontend != nil {
		pluginpb.RegisterFrontendServer(s, &frontendServer{p: p, broker: broker})
	}
	if p.hint != nil {
		pluginpb.RegisterHintServer(s, &hintServer{p: p})
	}
	return nil
}

func (p *serverPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, fmt.Errorf("the pbfs plugin side has no client")
}

type infoServer struct {
	pluginpb.UnimplementedPluginServer
	p *serverPlugin
}

// Validate asks a Validator, if the plugin is one.
func (s *infoServer) Validate(ctx context.Context, req *pluginpb.ValidateRequest) (*pluginpb.ValidateResponse, error) {
	v, ok := s.p.impl.(Validator)
	if !ok {
		return s.UnimplementedPluginServer.Validate(ctx, req)
	}
	if err := v.Validate(Config(req.Config)); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &pluginpb.ValidateResponse{}, nil
}

func (s *infoServer) Info(context.Context, *pluginpb.InfoRequest) (*pluginpb.InfoResponse, error) {
	r := &pluginpb.InfoResponse{Mtls: os.Getenv("PLUGIN_CLIENT_CERT") != ""}
	if d, ok := s.p.impl.(Describer); ok {
		i := d.Info()
		r.Name, r.Version = i.Name, i.Version
	}
	if s.p.frontend != nil {
		r.Kinds = append(r.Kinds, wire.KindFrontend)
	}
	if s.p.hint != nil {
		r.Kinds = append(r.Kinds, wire.KindHint)
	}
	return r, nil
}

type frontendServer struct {
	pluginpb.UnimplementedFrontendServer
	p      *serverPlugin
	broker *plugin.GRPCBroker

	mu   sync.Mutex
	conn *grpc.ClientConn // to the host's Host service
}

func (s *frontendServer) Start(ctx context.Context, req *pluginpb.StartRequest) (*pluginpb.StartResponse, error) {
	conn, err := s.broker.Dial(req.HostBrokerId)
	if err != nil {
		return nil, fmt.Errorf("start: reach the host: %w", err)
	}
	s.mu.Lock()
	if s.conn != nil {
		s.conn.Close()
	}
	s.conn = conn
	s.mu.Unlock()
	env := Env{Name: req.Name, Volume: req.Volume, Config: Config(req.Config), Host: &hostClient{c: pluginpb.NewHostClient(conn), line: s.p.line},
		Logger: s.p.log}
	if err := s.p.frontend.Start(ctx, env); err != nil {
		return nil, err
	}
	return &pluginpb.StartResponse{}, nil
}

func (s *frontendServer) Stop(ctx context.Context, _ *pluginpb.StopRequest) (*pluginpb.StopResponse, error) {
	err := s.p.frontend.Stop(ctx)
	s.mu.Lock()
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &pluginpb.StopResponse{}, nil
}

type hintServer struct {
	pluginpb.UnimplementedHintServer
	p *serverPlugin
}

func (s *hintServer) Rules(ctx context.Context, req *pluginpb.RulesRequest) (*pluginpb.RulesResponse, error) {
	rules, err := s.p.hint.Rules(ctx, HintEnv{Name: req.Name, Volume: req.Volume, Config: Config(req.Config), Logger: s.p.log})
	if err != nil {
		return nil, err
	}
	out := &pluginpb.RulesResponse{}
	for _, r := range rules {
		out.Rules = append(out.Rules, &pluginpb.Rule{Pattern: r.Pattern, Hint: hintToPB(r.Hint)})
	}
	return out, nil
}

// Check answers Unimplemented for a hint that is not a Checker: the host
// reads that as no findings.
func (s *hintServer) Check(ctx context.Context, req *pluginpb.RulesRequest) (*pluginpb.CheckResponse, error) {
	c, ok := s.p.hint.(Checker)
	if !ok {
		return s.UnimplementedHintServer.Check(ctx, req)
	}
	findings, err := c.Check(ctx, HintEnv{Name: req.Name, Volume: req.Volume, Config: Config(req.Config), Logger: s.p.log})
	if err != nil {
		return nil, err
	}
	out := &pluginpb.CheckResponse{}
	for _, f := range findings {
		out.Findings = append(out.Findings, &pluginpb.Finding{Severity: pluginpb.Severity(f.Severity), Setting: f.Setting, Value: f.Value, Message: f.Message})
	}
	return out, nil
}

func (s *hintServer) Classify(ctx context.Context, req *pluginpb.ClassifyRequest) (*pluginpb.ClassifyResponse, error) {
	hints, err := s.p.hint.Classify(ctx, req.Paths)
	if err != nil {
		return nil, err
	}
	if len(hints) != len(req.Paths) {
		return nil, fmt.Errorf("classify: %d hints for %d paths", len(hints), len(req.Paths))
	}
	out := &pluginpb.ClassifyResponse{}
	for _, h := range hints {
		out.Hints = append(out.Hints, hintToPB(h))
	}
	return out, nil
}
