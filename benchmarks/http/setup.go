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
	"github.com/pbfs/pbfs/benchmarks/internal/delayproxy"
	"github.com/pbfs/pbfs/benchmarks/internal/report"
)

// target is where one scenario's clients send requests, and the proxy's
// metrics address when they go through the proxy.
type target struct{ name, url, metrics string }

// setup is every scenario's processes, all started before the sweep so
// the scenarios run interleaved at each rate.
type setup struct {
	dir     string
	procs   []*benchproc.Proc
	proxies []*delayproxy.Proxy
	targets []target
}

// parseScenario reads plain, pbfs-N, pbfs-N-delay and pbfs-N-no-proxy.
func parseScenario(name string) (backups int, delay time.Duration, proxy bool, err error) {
	base, direct := strings.CutSuffix(name, "-no-proxy")
	backups, delay, err = report.ParseScenario(base)
	if err == nil && direct && backups < 0 {
		err = fmt.Errorf("scenario %q: plain has no proxy to go around", name)
	}
	return backups, delay, !direct && backups >= 0, err
}

func (s *setup) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		if err := s.procs[i].Stop(20 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	for _, px := range s.proxies {
		px.Close()
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
	s := &setup{dir: dir}
	svcBin := filepath.Join(dir, "service")
	if out, err := exec.Command("go", "build", "-o", svcBin, "./benchmarks/http/service").CombinedOutput(); err != nil {
		return s, fmt.Errorf("build the service: %v\n%s", err, out)
	}
	var tok [16]byte
	rand.Read(tok[:])
	env := []string{"PBFS_TOKEN=" + hex.EncodeToString(tok[:])}
	for _, name := range scenarios {
		backups, delay, viaProxy, _ := parseScenario(name)
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
			argv := []string{bin, "mount", "--journal", filepath.Join(sdir, "jp"), "--ack", "all"}
			for i := 0; i < backups; i++ {
				addr, err := benchproc.FreeAddr()
				if err != nil {
					return s, err
				}
				bvol := filepath.Join(sdir, fmt.Sprintf("b%d", i))
				os.Mkdir(bvol, 0o755)
				b, err := s.start(fmt.Sprintf("%s-backup%d", name, i), env, bin, "backup", "--listen", addr,
					"--journal", filepath.Join(sdir, fmt.Sprintf("jb%d", i)), bvol)
				if err != nil {
					return s, err
				}
				if err := benchproc.WaitListening(ctx, b, addr); err != nil {
					return s, err
				}
				if delay > 0 {
					px, err := delayproxy.New("127.0.0.1:0", addr, delay)
					if err != nil {
						return s, err
					}
					s.proxies = append(s.proxies, px)
					addr = px.Addr()
				}
				argv = append(argv, "--backup", addr)
			}
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
				argv = append(argv, "--plugin", "http-proxy="+proxyBin, "--plugin-config", cfg)
				t.url = "http://" + proxyAddr
			}
			if mount, err = s.start(name+"-primary", env, append(argv, vol)...); err != nil {
				return s, err
			}
			for i := 0; !benchproc.Mounted(vol); i++ {
				if mount.Exited() || i > 500 {
					return s, fmt.Errorf("%s: the mount did not come up:\n%s", name, mount.LogTail(20))
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		kv := filepath.Join(vol, "kv")
		os.Mkdir(kv, 0o755)
		p, err := s.start(name+"-service", nil, svcBin, "-listen", svcAddr, "-dir", kv)
		if err != nil {
			return s, err
		}
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
