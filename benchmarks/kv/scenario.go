package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/benchmarks/internal/cluster"
)

// scenario is one run's processes: the service, and for pbfs-N the
// backups and the mount with its proxy.
type scenario struct {
	name    string
	dir     string
	token   string
	jdir    string
	mount   *benchproc.Proc
	backups []*benchproc.Proc
	service *benchproc.Proc
	target  string // where clients send requests
	metrics string // the proxy's metrics address, when there is a proxy
	procs   []*benchproc.Proc
	cluster *cluster.Cluster // nil for plain
}

// buildService builds the key-value service once for the whole run.
func buildService(workdir string) (string, error) {
	f, err := os.CreateTemp(workdir, "pbfs-kv-service-")
	if err != nil {
		return "", err
	}
	f.Close()
	if out, err := exec.Command("go", "build", "-o", f.Name(), "./benchmarks/http/service").CombinedOutput(); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("build the service: %v\n%s", err, out)
	}
	return f.Name(), nil
}

func (s *scenario) start(name string, env []string, argv ...string) (*benchproc.Proc, error) {
	p, err := benchproc.Start(name, filepath.Join(s.dir, name+".log"), env, argv...)
	if err == nil {
		s.procs = append(s.procs, p)
	}
	return p, err
}

// up starts the scenario: backups, the mount (under prlimit when fdLimit
// is set) with the proxy, and the service on the volume; plain starts
// only the service, on a plain directory.
func up(ctx context.Context, cfg config, name string, sh shape, fdLimit int) (*scenario, error) {
	dir, err := os.MkdirTemp(cfg.workdir, "pbfs-kv-"+name+"-")
	if err != nil {
		return nil, err
	}
	var tok [16]byte
	rand.Read(tok[:])
	s := &scenario{name: name, dir: dir, token: hex.EncodeToString(tok[:]), jdir: filepath.Join(dir, "jp")}
	env := []string{"PBFS_TOKEN=" + s.token}
	vol := filepath.Join(dir, "vol")
	if err := os.Mkdir(vol, 0o755); err != nil {
		return s, err
	}
	svcAddr, err := benchproc.FreeAddr()
	if err != nil {
		return s, err
	}
	s.target = "http://" + svcAddr
	if name == bindfsScenario {
		if err := s.startBindfs(ctx, vol); err != nil {
			return s, err
		}
	}
	if sh.backups >= 0 {
		proxyAddr, err := benchproc.FreeAddr()
		if err != nil {
			return s, err
		}
		if s.metrics, err = benchproc.FreeAddr(); err != nil {
			return s, err
		}
		args := append([]string{}, cfg.mountArgs...)
		if sh.deferred {
			args = append(args, "--fsync", "deferred")
		}
		cc := cluster.Config{Bin: cfg.bin, Dir: dir, Vol: vol, Backups: sh.backups, Delay: sh.delay, Env: env,
			Args: append(args, "--plugin", "http-proxy="+cfg.proxy, "--plugin-config",
				fmt.Sprintf("http-proxy:listen=%s,upstream=http://%s,metrics=%s", proxyAddr, svcAddr, s.metrics))}
		if fdLimit > 0 {
			cc.Wrap = []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", fdLimit, fdLimit)}
		}
		c, err := cluster.Start(ctx, cc)
		s.cluster = c
		if err != nil {
			return s, err
		}
		s.mount, s.backups = c.Mount, c.Backups
		s.target = "http://" + proxyAddr
	}
	kv := filepath.Join(vol, "kv")
	if err := os.Mkdir(kv, 0o755); err != nil {
		return s, err
	}
	if s.service, err = s.start("service", nil, cfg.service, "-listen", svcAddr, "-dir", kv, "-keep-alive"); err != nil {
		return s, err
	}
	if err := benchproc.WaitListening(ctx, s.service, svcAddr); err != nil {
		return s, err
	}
	if s.mount != nil {
		return s, benchproc.WaitListening(ctx, s.mount, strings.TrimPrefix(s.target, "http://"))
	}
	return s, nil
}

// startBindfs mounts vol as a bindfs view of a plain directory. Its
// process stands in for the mount in the CPU figures. bindfs serves one
// request at a time unless told otherwise; pbfs serves many, and so does
// the floor (multithreaded, it made 5-30 % more inserts and updates).
func (s *scenario) startBindfs(ctx context.Context, vol string) error {
	src := filepath.Join(s.dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return err
	}
	p, err := s.start("bindfs", nil, "bindfs", "-f", "--multithreaded", src, vol)
	if err != nil {
		return err
	}
	s.mount = p
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(benchproc.MountsUnder(s.dir), vol) {
		if p.Exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("bindfs did not mount %s:\n%s", vol, p.LogTail(20))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// exited names the processes that are no longer running.
func (s *scenario) exited() []string {
	var out []string
	procs := append([]*benchproc.Proc{}, s.procs...)
	if s.cluster != nil {
		procs = append(procs, s.cluster.Procs...)
	}
	for _, p := range procs {
		if p.Exited() {
			out = append(out, fmt.Sprintf("%s (%v)", p.Name, p.Err))
		}
	}
	return out
}

// cpu is the CPU used so far by the service, the mount (its proxy and
// flush helper included: they are in its process group) and the backups.
func (s *scenario) cpu() (service, mount, backups benchproc.CPU) {
	service, mount = s.service.CPU(), s.mount.CPU()
	for _, b := range s.backups {
		backups = backups.Plus(b.CPU())
	}
	return service, mount, backups
}

// verify runs `pbfs verify`: every backup's volume must equal the
// primary's.
func (s *scenario) verify() (string, error) {
	if s.cluster == nil {
		return "no backups", nil
	}
	return s.cluster.Verify()
}

// shed reads the proxy's 503 counters by reason.
func (s *scenario) shed() map[string]float64 {
	out := map[string]float64{}
	if s.metrics == "" {
		return out
	}
	resp, err := http.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, "pbfs_proxy_shed_total{reason=\""); ok {
			if reason, val, ok := strings.Cut(rest, "\"} "); ok {
				out[reason], _ = strconv.ParseFloat(val, 64)
			}
		}
	}
	return out
}

// down stops everything and removes the run's directory (kept, with its
// logs, when keep is set).
func (s *scenario) down(keep bool) error {
	var errs []string
	for i := len(s.procs) - 1; i >= 0; i-- {
		if err := s.procs[i].Stop(30 * time.Second); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if err := s.cluster.Stop(); err != nil {
		errs = append(errs, err.Error())
	}
	for _, m := range benchproc.MountsUnder(s.dir) {
		syscall.Unmount(m, syscall.MNT_DETACH)
	}
	if !keep && len(errs) == 0 {
		os.RemoveAll(s.dir)
	}
	if len(errs) > 0 {
		return fmt.Errorf("stopping %s (logs kept in %s): %s", s.name, s.dir, strings.Join(errs, "; "))
	}
	return nil
}
