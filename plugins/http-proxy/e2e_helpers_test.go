package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/status"
	"github.com/pbfs/pbfs/internal/testservice"
)

// stack is the whole product on one machine: a test service writing to
// a pbfs volume, the primary with its backups (real processes), and the
// http-proxy plugin the primary runs in front of the service.
type stack struct {
	*fstest.Cluster
	svc     *testservice.Service
	proxy   string // client address
	metrics string // the proxy's /metrics address
}

// newStack starts everything; cfg adds to the proxy's configuration and
// wrap, if set, turns the plugin path into a wrapper's.
func newStack(t *testing.T, backups int, cfg string, wrap func(string) string) *stack {
	t.Helper()
	fstest.RequireFUSE(t)
	s := &stack{svc: &testservice.Service{}, proxy: fstest.FreeAddr(t), metrics: fstest.FreeAddr(t)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &http.Server{Handler: s.svc}
	t.Cleanup(func() { up.Close() })
	bin := fstest.Build(t, "github.com/pbfs/pbfs/plugins/http-proxy")
	if wrap != nil {
		bin = wrap(bin)
	}
	pcfg := fmt.Sprintf("http-proxy:listen=%s,upstream=http://%s,metrics=%s", s.proxy, ln.Addr(), s.metrics)
	if cfg != "" {
		pcfg += "," + cfg
	}
	s.Cluster = fstest.NewCluster(t, backups, func(vol string) {
		s.svc.Dir = filepath.Join(vol, "kv")
		os.Mkdir(s.svc.Dir, 0o755)
		go up.Serve(ln)
	}, "--plugin", "http-proxy="+bin, "--plugin-config", pcfg)
	s.waitPlugin(t, func(st status.Plugin) bool { return st.State == status.PluginRunning })
	// The plugin outlives a primary killed with -9; do not leak it.
	pid := s.plugin(t).Pid
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	return s
}

func (s *stack) plugin(t *testing.T) status.Plugin {
	t.Helper()
	st, err := s.Primary.Client().Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Plugins) != 1 {
		t.Fatalf("plugins %+v", st.Plugins)
	}
	return st.Plugins[0]
}

func (s *stack) waitPlugin(t *testing.T, cond func(status.Plugin) bool) status.Plugin {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := s.plugin(t)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugin status %+v\nprimary log:\n%s", st, s.Primary.Out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metric reads a sample from the proxy's /metrics, summing the label
// sets that contain label.
func (s *stack) metric(t *testing.T, name, label string) float64 {
	t.Helper()
	return fstest.ScrapeSum(t, "http://"+s.metrics+"/metrics", name, label)
}
