package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// TestProxyFollowsThePrimary: every node runs the http-proxy plugin's
// address; a client that knows one address (a backup's) posts through it
// while the primary is killed with -9 (its service and plugin with it, as
// a machine loss would). The backups forward to the primary, and after the
// failover the same address serves again, through the new primary; every
// POST the client saw succeed is there, and the lost node, back, rejoins
// and converges.
func TestProxyFollowsThePrimary(t *testing.T) {
	proxyBin := fstest.Build(t, "github.com/pbfs/pbfs/plugins/http-proxy")
	serviceBin := fstest.Build(t, "github.com/pbfs/pbfs/benchmarks/http/service")
	proxies := map[string]string{}
	c := startNodesWith(t, 1, 3, func(nd *node) []string {
		proxy, svc := fstest.FreeAddr(t), fstest.FreeAddr(t)
		proxies[nd.name] = proxy
		pid := filepath.Join(nd.hooks, "service.pid")
		return []string{"--plugin", "http-proxy=" + proxyBin,
			"--plugin-config", fmt.Sprintf("http-proxy:listen=%s,upstream=http://%s", proxy, svc),
			"--on-promote", fmt.Sprintf("mkdir -p $PBFS_VOLUME/kv && %s -listen %s -dir $PBFS_VOLUME/kv >/dev/null 2>&1 & echo $! > %s", serviceBin, svc, pid),
			"--on-demote", fmt.Sprintf("kill $(cat %s)", pid)}
	})
	primary, _ := c.leader(60 * time.Second)
	var client *node // a backup's address
	for _, nd := range c.nodes {
		if nd != primary {
			client = nd
			break
		}
	}
	url := "http://" + proxies[client.name] + "/kv/"
	var mu sync.Mutex
	acked := map[string]string{}
	post := func(i int) bool {
		key, body := fmt.Sprintf("k%05d", i), fmt.Sprintf("value %d", i)
		resp, err := http.Post(url+key, "text/plain", strings.NewReader(body))
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return false
		}
		mu.Lock()
		acked[key] = body
		mu.Unlock()
		return true
	}
	// Through the backup, forwarded to the primary.
	for i := 0; !post(i); i++ {
		if i > 200 {
			t.Fatalf("the backup's address never forwarded a POST:\n%s", c.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 1; i < 30; i++ {
		post(i)
	}
	// Machine loss: the node, its plugin and its service.
	if data, err := os.ReadFile(filepath.Join(primary.hooks, "service.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	killTree(primary.cmd.Process.Pid)
	primary.cmd.Wait()
	killed := time.Now()
	i := 1000
	for ; !post(i); i++ {
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("the client's address never served again after the failover:\n%s", c.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the client's address served again %v after the kill", time.Since(killed).Round(time.Millisecond))
	for j := i + 1; j < i+20; j++ {
		post(j)
	}
	next, _ := c.leader(10 * time.Second)
	// The lost machine comes back: it rejoins as a backup and converges.
	c.start(primary)
	c.converge(next)
	mu.Lock()
	defer mu.Unlock()
	for key, body := range acked {
		resp, err := http.Get(url + key)
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != body {
			t.Fatalf("acknowledged POST %s lost: GET says %q (%s)", key, got, resp.Status)
		}
		if data, err := os.ReadFile(filepath.Join(next.vol, "kv", key)); err != nil || string(data) != body {
			t.Fatalf("acknowledged POST %s not on the new primary's volume: %q %v", key, data, err)
		}
	}
}

// killTree kills a process and its children with SIGKILL.
func killTree(pid int) {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(data)) {
		if child, err := strconv.Atoi(f); err == nil {
			killTree(child)
		}
	}
	fstest.KillHard(pid)
}
