package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/cluster"
	"github.com/pbfs/pbfs/benchmarks/internal/report"
)

// target is where one scenario's clients send requests, and the proxy's
// metrics address when they go through the proxy.
type target struct {
	name, url, metrics string
	svc                *benchproc.Proc   // the service
	mount              *benchproc.Proc   // the primary (nil: plain)
	backups            []*benchproc.Proc // its backups
	proxyName          string            // the proxy plugin's process name ("": no proxy)
}

// setup is every scenario's processes, all started before the sweep so
// the scenarios run interleaved at each rate.
type setup struct {
	dir      string
	procs    []*benchproc.Proc
	clusters []*cluster.Cluster
	targets  []target
	// clusterOf is each pbfs scenario's primary and backups.
	clusterOf map[string]*cluster.Cluster
}

// scenario is what a scenario's name asks for.
type scenario struct {
	backups  int // -1: plain
	delay    time.Duration
	proxy    bool // clients go through the http-proxy
	deferred bool // the mount runs with --fsync deferred
}

// parseScenario reads plain, pbfs-N, pbfs-N-delay, pbfs-N-no-proxy and
// pbfs-N-deferred.
func parseScenario(name string) (scenario, error) {
	base, deferred := strings.CutSuffix(name, "-deferred")
	base, direct := strings.CutSuffix(base, "-no-proxy")
	backups, delay, err := report.ParseScenario(base)
	switch {
	case err == nil && (direct || deferred) && backups < 0:
		err = fmt.Errorf("scenario %q: plain has no proxy and no mount", name)
	case err == nil && direct && deferred:
		err = fmt.Errorf("scenario %q: deferred fsyncs are only durable through the proxy", name)
	}
	return scenario{backups: backups, delay: delay, proxy: !direct && backups >= 0, deferred: deferred}, err
}

func (s *setup) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		if err := s.procs[i].Stop(20 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	for i := len(s.clusters) - 1; i >= 0; i-- {
		if err := s.clusters[i].Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	for _, m := range benchproc.MountsUnder(s.dir) {
		syscall.Unmount(m, syscall.MNT_DETACH)
	}
	os.RemoveAll(s.dir)
}

func (s *setup) start(name string, env []string, argv ...string) (*benchproc.Proc, error) {
	p, err := benchproc.Start(name, filepath.Join(s.dir, name+".log"), env, argv...)
	if err == nil {
		s.procs = append(s.procs, p)
	}
	return p, err
}

func startAll(ctx context.Context, bin, proxyBin string, scenarios []string, pool, barriers int, extra, workdir string) (*setup, error) {
	dir, err := os.MkdirTemp(workdir, "pbfs-http-bench-")
	if err != nil {
		return nil, err
	}
	s := &setup{dir: dir, clusterOf: map[string]*cluster.Cluster{}}
	svcBin := filepath.Join(dir, "service")
	if out, err := exec.Command("go", "build", "-o", svcBin, "./benchmarks/http/service").CombinedOutput(); err != nil {
		return s, fmt.Errorf("build the service: %v\n%s", err, out)
	}
	var tok [16]byte
	rand.Read(tok[:])
	env := []string{"PBFS_TOKEN=" + hex.EncodeToString(tok[:])}
	for _, name := range scenarios {
		sc, _ := parseScenario(name)
		backups, delay, viaProxy := sc.backups, sc.delay, sc.proxy
		sdir := filepath.Join(dir, name)
		vol := filepath.Join(sdir, "vol")
		if err := os.MkdirAll(vol, 0o755); err != nil {
			return s, err
		}
		svcAddr, err := benchproc.FreeAddr()
		if err != nil {
			return s, err
		}
		t := target{name: name, url: "http://" + svcAddr}
		var mount *benchproc.Proc
		if backups >= 0 {
			cc := cluster.Config{Bin: bin, Dir: sdir, Vol: vol, Name: name + "-", Backups: backups, Delay: delay, Env: env}
			if viaProxy {
				proxyAddr, err := benchproc.FreeAddr()
				if err != nil {
					return s, err
				}
				if t.metrics, err = benchproc.FreeAddr(); err != nil {
					return s, err
				}
				cfg := fmt.Sprintf("http-proxy:listen=%s,upstream=http://%s,metrics=%s,pool=%d,barriers=%d", proxyAddr, svcAddr, t.metrics, pool, barriers)
				if extra != "" {
					cfg += "," + extra
				}
				cc.Args = []string{"--plugin", "http-proxy=" + proxyBin, "--plugin-config", cfg}
				if sc.deferred {
					cc.Args = append(cc.Args, "--fsync", "deferred")
				}
				t.url = "http://" + proxyAddr
				t.proxyName = commName(proxyBin)
			}
			c, err := cluster.Start(ctx, cc)
			if c != nil {
				s.clusters = append(s.clusters, c)
				s.clusterOf[name] = c
			}
			if err != nil {
				return s, fmt.Errorf("%s: %w", name, err)
			}
			mount = c.Mount
			t.mount, t.backups = c.Mount, c.Backups
		}
		kv := filepath.Join(vol, "kv")
		os.Mkdir(kv, 0o755)
		p, err := s.start(name+"-service", nil, svcBin, "-listen", svcAddr, "-dir", kv)
		if err != nil {
			return s, err
		}
		t.svc = p
		if err := benchproc.WaitListening(ctx, p, svcAddr); err != nil {
			return s, err
		}
		if viaProxy {
			if err := benchproc.WaitListening(ctx, mount, strings.TrimPrefix(t.url, "http://")); err != nil {
				return s, err
			}
		}
		s.targets = append(s.targets, t)
	}
	return s, nil
}
