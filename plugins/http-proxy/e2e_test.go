package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/status"
	"github.com/pbfs/pbfs/internal/timerslack"
)

// keepAliveClient is one client with one connection, counting dials.
func keepAliveClient(dials *atomic.Int64, timeout time.Duration) *http.Client {
	d := &net.Dialer{}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		MaxIdleConnsPerHost: 1,
		DialContext: func(ctx context.Context, n, a string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, n, a)
		},
	}}
}

// TestAckedRequestsSurviveKill9 is output commit end to end: clients POST
// through the proxy to a service writing to the pbfs volume; the primary
// and both backups are killed with -9 in the middle of the load; after
// the backups restart, every write a client got a 2xx for is on both.
// Along the way: the service answers "Connection: close", yet each client
// keeps one connection, and the proxy never holds more upstream
// connections than its pool.
func TestAckedRequestsSurviveKill9(t *testing.T) {
	const clients, pool = 8, 4
	s := newStack(t, 2, fmt.Sprintf("pool=%d", pool), nil)
	var (
		mu    sync.Mutex
		acked = map[string]string{}
		dials atomic.Int64
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := keepAliveClient(&dials, 30*time.Second)
			for i := 0; !stop.Load(); i++ {
				key, body := fmt.Sprintf("c%d-%d", w, i), fmt.Sprintf("client %d request %d %s", w, i, strings.Repeat("x", i%300))
				resp, err := c.Post("http://"+s.proxy+"/kv/"+key, "text/plain", strings.NewReader(body))
				if err != nil {
					return // the primary is gone
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 == 2 {
					if resp.Close {
						t.Errorf("response to %s closes the client connection", key)
					}
					mu.Lock()
					acked[key] = body
					mu.Unlock()
				}
			}
		}()
	}
	maxUp := 0.0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		maxUp = max(maxUp, s.metric(t, "pbfs_proxy_upstream_connections", ""))
	}
	if maxUp > pool {
		t.Errorf("%v upstream connections open at once; the pool is %d", maxUp, pool)
	}
	if d := dials.Load(); d != clients {
		t.Errorf("%d clients opened %d connections: keep-alive was not kept", clients, d)
	}
	// Kill everything at once, mid-load.
	pluginPid := s.plugin(t).Pid
	s.Primary.Kill()
	for _, b := range s.Backups {
		b.Cmd.Process.Kill()
	}
	stop.Store(true)
	wg.Wait()
	// The plugin follows its killed host out (it would otherwise keep the
	// port from a restarted primary's new proxy).
	for deadline := time.Now().Add(5 * time.Second); syscall.Kill(pluginPid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy (pid %d) outlived its killed primary", pluginPid)
		}
	}
	syscall.Unmount(s.Vol, syscall.MNT_DETACH)
	for _, b := range s.Backups {
		b.Cmd.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 20 {
		t.Fatalf("only %d requests acknowledged in 2 s", len(acked))
	}
	for _, b := range s.Backups {
		s.StartBackup(b)
		deadline := time.Now().Add(20 * time.Second)
		for key, body := range acked {
			for {
				data, err := os.ReadFile(filepath.Join(b.Vol, "kv", key))
				if err == nil && string(data) == body {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("backup %s lost acknowledged request %s: %q %v\n%s", b.Addr, key, data, err, b.Out)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	t.Logf("%d acknowledged requests, all on both backups after kill -9; %d client connections; at most %v upstream connections",
		len(acked), dials.Load(), maxUp)
}

// TestDeadBackupHoldsResponses: with --ack all, a stopped backup holds
// every response (a 503 once barrier-timeout passes), and a held response
// goes out as soon as the backup is back. Never an early 2xx.
func TestDeadBackupHoldsResponses(t *testing.T) {
	s := newStack(t, 1, "barrier-timeout=3s", nil)
	b := s.Backups[0]
	fstest.Freeze(t, b.Cmd.Process)

	began := time.Now()
	resp, err := http.Post("http://"+s.proxy+"/kv/timeout", "text/plain", strings.NewReader("v"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || time.Since(began) < 2500*time.Millisecond {
		t.Fatalf("with the backup stopped: %d after %v: %s", resp.StatusCode, time.Since(began), body)
	}

	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Post("http://"+s.proxy+"/kv/held", "text/plain", strings.NewReader("held"))
		if err != nil {
			done <- result{err: err}
			return
		}
		resp.Body.Close()
		done <- result{code: resp.StatusCode}
	}()
	select {
	case r := <-done:
		t.Fatalf("response released while the backup is stopped: %+v", r)
	case <-time.After(1500 * time.Millisecond):
	}
	fstest.Thaw(b.Cmd.Process)
	r := <-done
	if r.err != nil || r.code != http.StatusCreated {
		t.Fatalf("after the backup came back: %+v", r)
	}
	if f := s.metric(t, "pbfs_proxy_barrier_failures_total", ""); f < 1 {
		t.Fatalf("barrier failures metric %v", f)
	}
}

// TestProxyUnderFdLimit: the proxy runs with at most 256 file descriptors
// and 2,000 clients connect at once. It must not crash, must keep serving,
// and must report what it shed.
func TestProxyUnderFdLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 clients")
	}
	wrapper := filepath.Join(t.TempDir(), "http-proxy-limited")
	s := newStack(t, 0, "", func(bin string) string {
		os.WriteFile(wrapper, []byte("#!/bin/sh\nexec prlimit --nofile=256:256 "+bin+" \"$@\"\n"), 0o755)
		return wrapper
	})
	pid := s.plugin(t).Pid
	limits, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if !strings.Contains(string(limits), "Max open files            256                  256") {
		t.Fatalf("the proxy does not run under the limit:\n%s", limits)
	}
	const clients, each = 2000, 3
	var ok, shed, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dials atomic.Int64
			c := keepAliveClient(&dials, 20*time.Second)
			defer c.CloseIdleConnections()
			<-start
			for i := 0; i < each; i++ {
				resp, err := c.Post(fmt.Sprintf("http://%s/kv/fd%d-%d", s.proxy, w, i), "text/plain", strings.NewReader("v"))
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusCreated:
					ok.Add(1)
				case resp.StatusCode == http.StatusServiceUnavailable:
					shed.Add(1)
				default:
					failed.Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	st := s.plugin(t)
	if st.Pid != pid || st.Restarts != 0 || st.State != status.PluginRunning {
		t.Fatalf("the proxy did not survive: %+v\n%s", st, s.Primary.Out)
	}
	if ok.Load() == 0 {
		t.Fatalf("nothing served: shed %d failed %d", shed.Load(), failed.Load())
	}
	reported := s.metric(t, "pbfs_proxy_shed_total", "")
	acceptErrs := s.metric(t, "pbfs_proxy_accept_errors_total", "")
	dialErrs := s.metric(t, "pbfs_proxy_upstream_dial_errors_total", "")
	t.Logf("%d requests from %d clients under 256 fds: %d served, %d shed (503), %d failed at the client; the proxy reports %v shed, %v accept errors, %v upstream dial errors",
		clients*each, clients, ok.Load(), shed.Load(), failed.Load(), reported, acceptErrs, dialErrs)
	if e := firstErr.Load(); e != nil {
		t.Logf("first client error: %v", e)
	}
	if reported < float64(shed.Load()) {
		t.Errorf("the proxy reports %v shed, clients saw %d", reported, shed.Load())
	}
	if shed.Load()+failed.Load() > 0 && reported+acceptErrs == 0 {
		t.Error("requests were turned away but nothing was counted")
	}
	// And it serves normally once the storm is over.
	var dials atomic.Int64
	c := keepAliveClient(&dials, 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := c.Post("http://"+s.proxy+"/kv/after", "text/plain", strings.NewReader("after"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy does not serve after the storm: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCrashedPluginIsRestarted: kill -9 the proxy; the mount keeps
// working throughout and the proxy is back, serving, with a new pid.
func TestCrashedPluginIsRestarted(t *testing.T) {
	s := newStack(t, 1, "", nil)
	old := s.plugin(t)
	syscall.Kill(old.Pid, syscall.SIGKILL)
	os.WriteFile(filepath.Join(s.Vol, "during"), []byte("written while the plugin was down"), 0o644)
	s.Barrier()
	st := s.waitPlugin(t, func(st status.Plugin) bool {
		return st.State == status.PluginRunning && st.Pid != old.Pid && st.Restarts >= 1
	})
	t.Cleanup(func() { syscall.Kill(st.Pid, syscall.SIGKILL) })
	if st.Restarts != 1 {
		t.Fatalf("status %+v", st)
	}
	resp, err := http.Post("http://"+s.proxy+"/kv/back", "text/plain", strings.NewReader("back"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("after restart: %d", resp.StatusCode)
	}
	s.RequireConverged()
}

// TestRefusedPluginLeavesMountServing: a plugin of the wrong protocol
// version is refused with a clear message (`pbfs plugin check` and the
// mount's status), and the mount serves regardless.
func TestRefusedPluginLeavesMountServing(t *testing.T) {
	fstest.RequireFUSE(t)
	future := fstest.Build(t, "github.com/pbfs/pbfs/plugins/sdk/host/testdata/future")
	out, err := exec(t, "plugin", "check", future)
	if err == nil || !strings.Contains(out, "protocol version not supported") || !strings.Contains(out, "Plugin version: 99") {
		t.Fatalf("plugin check: %v\n%s", err, out)
	}
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	os.Mkdir(vol, 0o755)
	p := fstest.StartMount(t, nil, vol, jdir, "--plugin", "future="+future)
	os.WriteFile(filepath.Join(vol, "f"), []byte("the mount works"), 0o644)
	p.Barrier()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec(t, "plugin", "ls", "--journal", jdir)
		if strings.Contains(out, "restarting") && strings.Contains(out, "Plugin version: 99") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugin ls:\n%s\nmount log:\n%s", out, p.Out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func exec(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := osexec.Command(fstest.Binary(t), args...)
	out, err := cmd.CombinedOutput()
	var ee *osexec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return string(out), err
}

// TestProxyRunsOnOneCPU: by default the proxy runs its Go code on one
// CPU (docs/PLUGINS.md, "One CPU by default"), and procs changes it; its
// /metrics shows that and its own CPU time. Its Go runtime's monitor
// thread, and no other, has a 1 ms timer slack unless monitor-slack=0.
func TestProxyRunsOnOneCPU(t *testing.T) {
	for _, tc := range []struct {
		cfg      string
		want     float64
		monitors int
	}{{"", 1, 1}, {"procs=2", 2, 1}, {"monitor-slack=0", 1, 0}} {
		s := newStack(t, 0, tc.cfg, nil)
		url := "http://" + s.metrics + "/metrics"
		if got := fstest.ScrapeSum(t, url, "go_sched_gomaxprocs_threads", ""); got != tc.want {
			t.Errorf("config %q: GOMAXPROCS %v, want %v", tc.cfg, got, tc.want)
		}
		if cpu := fstest.ScrapeSum(t, url, "process_cpu_seconds_total", ""); cpu <= 0 {
			t.Errorf("config %q: process_cpu_seconds_total %v, want the proxy's CPU time", tc.cfg, cpu)
		}
		if os.Geteuid() == 0 { // setting another thread's slack needs CAP_SYS_NICE
			if got := slowedThreads(t, s.plugin(t).Pid, tc.monitors); got != tc.monitors {
				t.Errorf("config %q: %d threads with a 1 ms timer slack, want %d", tc.cfg, got, tc.monitors)
			}
		}
	}
}

// slowedThreads counts the threads of process pid with a 1 ms timer slack,
// waiting up to 5 s for want of them (the monitor is looked for once the
// proxy starts, and threads it starts inherit its slack for up to a
// second).
func slowedThreads(t *testing.T, pid, want int) int {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, tid := range tids {
			id, _ := strconv.Atoi(tid.Name())
			if d, err := timerslack.Of(id); err == nil && d == time.Millisecond {
				n++
			}
		}
		if n == want || time.Now().After(deadline) {
			return n
		}
	}
}
