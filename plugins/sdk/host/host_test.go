package host_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/status"
	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/host"
	"github.com/pbfs/pbfs/plugins/sdk/sdktest"
)

const mod = "github.com/pbfs/pbfs/plugins/"

func TestCheckExample(t *testing.T) {
	info, err := host.Check(context.Background(), fstest.Build(t, mod+"example"), host.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "example" || info.Protocol != sdk.ProtocolVersion || !info.MTLS || !reflect.DeepEqual(info.Kinds, []string{"frontend", "hint"}) {
		t.Fatalf("info %+v", info)
	}
}

func TestWrongHandshakeRefused(t *testing.T) {
	_, err := host.Check(context.Background(), fstest.Build(t, mod+"sdk/host/testdata/wrongcookie"), host.Options{})
	if !errors.Is(err, host.ErrHandshake) {
		t.Fatalf("err %v", err)
	}
	var log fstest.Buffer
	_, err = host.Check(context.Background(), "/bin/true", host.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if !errors.Is(err, host.ErrHandshake) {
		t.Fatalf("/bin/true: err %v", err)
	}
	// The process that never came up is reaped without a word: the error
	// says it all, and a supervisor retrying it logged a warning each time.
	if strings.Contains(log.String(), "gracefully") {
		t.Fatalf("a plugin that never started was said to have failed to exit gracefully:\n%s", log.String())
	}
}

func TestFutureVersionRefused(t *testing.T) {
	_, err := host.Check(context.Background(), fstest.Build(t, mod+"sdk/host/testdata/future"), host.Options{})
	if !errors.Is(err, host.ErrVersion) {
		t.Fatalf("err %v", err)
	}
}

// A host one major version ahead still runs plugins built for the
// version before; two ahead refuses them.
func TestHostAcceptsPreviousVersion(t *testing.T) {
	ex := fstest.Build(t, mod+"example")
	info, err := host.Check(context.Background(), ex, host.Options{Version: sdk.ProtocolVersion + 1})
	if err != nil || info.Protocol != sdk.ProtocolVersion {
		t.Fatalf("host v%d with a v%d plugin: %+v %v", sdk.ProtocolVersion+1, sdk.ProtocolVersion, info, err)
	}
	if _, err := host.Check(context.Background(), ex, host.Options{Version: sdk.ProtocolVersion + 2}); !errors.Is(err, host.ErrVersion) {
		t.Fatalf("host v%d accepted a v%d plugin: %v", sdk.ProtocolVersion+2, sdk.ProtocolVersion, err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A plugin that crashes is started again, with backoff, every time.
func TestSupervisorRestartsCrashedPlugin(t *testing.T) {
	dir := t.TempDir()
	s := host.Start(host.SupervisorConfig{
		Specs: []host.Spec{{Name: "crasher", Path: fstest.Build(t, mod+"sdk/host/testdata/crasher"),
			Config: map[string]string{"crash-after": "200ms", "touch": filepath.Join(dir, "started")}}},
		Host: sdktest.NewHost(), MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
	})
	defer s.Close()
	waitFor(t, "three restarts", func() bool { return s.Status()[0].Restarts >= 3 })
	starts, _ := filepath.Glob(filepath.Join(dir, "started.*"))
	if len(starts) < 3 {
		t.Fatalf("%d incarnations started for %d restarts", len(starts), s.Status()[0].Restarts)
	}
	if st := s.Status()[0]; st.LastError == "" {
		t.Fatalf("no error recorded: %+v", st)
	}
}

// Plugins that crash or are killed leave nothing in the temp directory:
// go-plugin removes a plugin's socket only when Serve returns, so each
// launch gets a socket directory of its own that the host removes.
func TestPluginsLeaveNoSockets(t *testing.T) {
	crasher, ex := fstest.Build(t, mod+"sdk/host/testdata/crasher"), fstest.Build(t, mod+"example")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	// A socket directory the host itself was given is not the plugins'.
	shared := t.TempDir()
	canary := filepath.Join(shared, "canary")
	if err := os.WriteFile(canary, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PLUGIN_UNIX_SOCKET_DIR", shared)
	s := host.Start(host.SupervisorConfig{
		Specs: []host.Spec{
			{Name: "crasher", Path: crasher, Config: map[string]string{"crash-after": "100ms"}},
			{Name: "ex", Path: ex},
		},
		Host: sdktest.NewHost(), MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
	})
	defer s.Close()
	waitFor(t, "two crashes and the example running", func() bool {
		st := s.Status()
		return st[0].Restarts >= 2 && st[1].State == status.PluginRunning
	})
	if err := syscall.Kill(s.Status()[1].Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed example restarted", func() bool {
		st := s.Status()[1]
		return st.Restarts >= 1 && st.State == status.PluginRunning
	})
	s.Close()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if len(left) > 0 {
		t.Fatalf("left in the temp directory after crashes, a kill -9 and Close: %v", left)
	}
	if entries, _ := os.ReadDir(shared); len(entries) != 1 {
		t.Fatalf("the host's own PLUGIN_UNIX_SOCKET_DIR was used or removed: %v", entries)
	}
}

// A plugin that cannot start (wrong version) is retried, with its error
// in the status, and never stops the supervisor's other plugins.
func TestSupervisorKeepsRefusedPluginOutOfTheWay(t *testing.T) {
	h := sdktest.NewHost()
	s := host.Start(host.SupervisorConfig{
		Specs: []host.Spec{
			{Name: "future", Path: fstest.Build(t, mod+"sdk/host/testdata/future")},
			{Name: "ex", Path: fstest.Build(t, mod+"example"), Config: map[string]string{"interval": "20ms"}},
		},
		Host: h, MinBackoff: 20 * time.Millisecond,
	})
	defer s.Close()
	waitFor(t, "the example's barriers", func() bool { return h.Barriers() >= 3 })
	waitFor(t, "the refusal", func() bool { return s.Status()[0].Restarts >= 1 })
	st := s.Status()
	if st[0].State == status.PluginRunning || !contains(st[0].LastError, "protocol version") || st[1].State != status.PluginRunning {
		t.Fatalf("status %+v", st)
	}
}

// A plugin that stops answering (SIGSTOP here; a deadlock alike) is
// restarted. It stayed "running", with pbfs_plugin_up 1, while it served
// nobody.
func TestSupervisorRestartsUnresponsivePlugin(t *testing.T) {
	s := host.Start(host.SupervisorConfig{
		Specs: []host.Spec{{Name: "ex", Path: fstest.Build(t, mod+"example"), Config: map[string]string{"interval": "20ms"}}},
		Host:  sdktest.NewHost(), PingEvery: 100 * time.Millisecond, Unresponsive: time.Second,
		MinBackoff: 20 * time.Millisecond,
	})
	defer s.Close()
	waitFor(t, "running", func() bool { return s.Status()[0].State == status.PluginRunning })
	time.Sleep(500 * time.Millisecond) // answering its health checks
	if st := s.Status()[0]; st.Restarts != 0 {
		t.Fatalf("a healthy plugin was restarted: %+v", st)
	}
	pid := s.Status()[0].Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, "a restart", func() bool {
		st := s.Status()[0]
		return st.Restarts >= 1 && st.State == status.PluginRunning && st.Pid != pid
	})
}

// Close stops frontends and their processes.
func TestSupervisorCloseStopsPlugins(t *testing.T) {
	h := sdktest.NewHost()
	s := host.Start(host.SupervisorConfig{
		Specs: []host.Spec{{Name: "ex", Path: fstest.Build(t, mod+"example"), Config: map[string]string{"interval": "20ms"}}},
		Host:  h,
	})
	waitFor(t, "running", func() bool { return s.Status()[0].State == status.PluginRunning })
	pid := s.Status()[0].Pid
	s.Close()
	if st := s.Status()[0]; st.State != status.PluginStopped {
		t.Fatalf("state %s", st.State)
	}
	n := h.Barriers()
	time.Sleep(100 * time.Millisecond)
	if h.Barriers() != n {
		t.Fatal("barriers after Close")
	}
	if err := syscall.Kill(pid, 0); err == nil {
		p, _ := os.FindProcess(pid)
		p.Kill()
		t.Fatalf("plugin process %d still alive after Close", pid)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestParseSpecs(t *testing.T) {
	specs, err := host.ParseSpecs([]string{"http-proxy=/usr/lib/pbfs/http-proxy", "ex=./example"},
		[]string{"http-proxy:listen=127.0.0.1:8080,upstream=http://127.0.0.1:80", "http-proxy:pool=8", "ex:local=tmp/|*.pid"})
	if err != nil {
		t.Fatal(err)
	}
	want := []host.Spec{
		{Name: "http-proxy", Path: "/usr/lib/pbfs/http-proxy", Config: map[string]string{"listen": "127.0.0.1:8080", "upstream": "http://127.0.0.1:80", "pool": "8"}},
		{Name: "ex", Path: "./example", Config: map[string]string{"local": "tmp/|*.pid"}},
	}
	if !reflect.DeepEqual(specs, want) {
		t.Fatalf("specs %+v", specs)
	}
	for _, bad := range [][2][]string{
		{{"noequals"}, nil},
		{{"Bad Name=/x"}, nil},
		{{"a=/x", "a=/y"}, nil},
		{{"a=/x"}, {"b:k=v"}},
		{{"a=/x"}, {"a:novalue"}},
		{{"a=/x"}, {"nocolon"}},
	} {
		if _, err := host.ParseSpecs(bad[0], bad[1]); err == nil {
			t.Errorf("accepted %v %v", bad[0], bad[1])
		}
	}
}
