package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// TestProxyFollowsThePrimary: every node runs the http-proxy plugin's
// address; two clients, each knowing one backup's address, post through
// it without pause while the primary is killed with -9 (its service and
// plugin with it, as a machine loss would). The backups forward to the
// primary, and hold every request during the failover until the new
// primary serves it: neither client sees a single error, on the node that
// takes over too (its address is never refused). Their requests carry an
// Idempotency-Key, so one the lost primary had may be sent again. Every
// POST a client saw succeed is there, the failover's record says how long
// clients waited, and the lost node, back, rejoins and converges.
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
	var clients []*proxyClient
	for _, nd := range c.nodes {
		if nd != primary {
			clients = append(clients, &proxyClient{name: nd.name, addr: proxies[nd.name], url: "http://" + proxies[nd.name] + "/kv/", acked: map[string]string{}})
		}
	}
	for _, cl := range clients {
		for i := 0; !cl.post(i); i++ { // through the backup, forwarded to the primary
			if i > 200 {
				t.Fatalf("%s's address never forwarded a POST: %v\n%s", cl.name, cl.fails, c.logs())
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.fails = nil
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var refused atomic.Int32 // connections to a client's address refused
	for _, cl := range clients {
		wg.Add(2)
		go func() { defer wg.Done(); cl.run(stop) }()
		go func() { defer wg.Done(); refused.Add(dialUntil(cl.addr, stop)) }()
	}
	time.Sleep(time.Second)
	// Machine loss: the node, its plugin and its service.
	pids := []int{primary.cmd.Process.Pid}
	if data, err := os.ReadFile(filepath.Join(primary.hooks, "service.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			pids = append(pids, pid)
		}
	}
	loseMachine(pids...)
	primary.cmd.Wait()
	killed := time.Now()
	for _, cl := range clients {
		cl.served.Store(0)
	}
	next, _ := c.leader(30 * time.Second)
	for _, cl := range clients {
		for cl.served.Load() < 20 && time.Since(killed) < 30*time.Second {
			time.Sleep(50 * time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	for _, cl := range clients {
		t.Logf("%s: %d POSTs acknowledged through the failover; longest wait %v", cl.name, len(cl.acked), cl.longest.Round(time.Millisecond))
		if len(cl.fails) > 0 {
			t.Errorf("a client of %s saw %d errors through the failover to %s: %q", cl.name, len(cl.fails), next.name, cl.fails)
		}
	}
	if n := refused.Load(); n > 0 {
		t.Errorf("%d connections to the clients' addresses were refused during the failover", n)
	}
	if t.Failed() {
		t.Fatal(c.logs())
	}
	c.requireFailoverWaited(killed)
	// The lost machine comes back: it rejoins as a backup and converges.
	c.start(primary)
	c.converge(next)
	for _, cl := range clients {
		for key, body := range cl.acked {
			resp, err := http.Get(cl.url + key)
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
}

// proxyClient posts one request at a time to one node's proxy address,
// each with an idempotency key, keeping what was acknowledged and every
// error it saw.
type proxyClient struct {
	name, addr, url string
	acked           map[string]string
	fails           []string
	served          atomic.Int32 // acknowledged since run began
	longest         time.Duration
}

func (cl *proxyClient) post(i int) bool {
	key, body := fmt.Sprintf("%s-k%05d", cl.name, i), fmt.Sprintf("value %d", i)
	req, _ := http.NewRequest(http.MethodPost, cl.url+key, strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cl.fails = append(cl.fails, err.Error())
		return false
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		cl.fails = append(cl.fails, resp.Status+": "+string(msg))
		return false
	}
	cl.longest = max(cl.longest, time.Since(start))
	cl.acked[key] = body
	return true
}

// dialUntil connects to addr every few milliseconds until stop, and
// returns how many connections were refused.
func dialUntil(addr string, stop chan struct{}) int32 {
	var refused int32
	for {
		select {
		case <-stop:
			return refused
		case <-time.After(5 * time.Millisecond):
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if errors.Is(err, syscall.ECONNREFUSED) {
			refused++
		} else if err == nil {
			c.Close()
		}
	}
}

// run posts until stop, counting what is acknowledged.
func (cl *proxyClient) run(stop chan struct{}) {
	for i := 1000; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		if cl.post(i) {
			cl.served.Add(1)
		}
	}
}

// loseMachine kills the processes given and all their descendants as a
// machine loss does, at once: every one is stopped (SIGSTOP) before any is
// killed, so none sees another die and answers a client meanwhile (a proxy
// outliving its service or its host would answer 502 or 503 itself).
func loseMachine(pids ...int) {
	var all []int
	var walk func(int)
	walk = func(pid int) {
		syscall.Kill(pid, syscall.SIGSTOP)
		all = append(all, pid)
		// Each thread lists the children it forked.
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, task := range tasks {
			data, _ := os.ReadFile(task)
			for _, f := range strings.Fields(string(data)) {
				if child, err := strconv.Atoi(f); err == nil {
					walk(child)
				}
			}
		}
	}
	for _, pid := range pids {
		walk(pid)
	}
	for _, pid := range all {
		fstest.KillHard(pid)
	}
}
