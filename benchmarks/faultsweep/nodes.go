package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/coord"
	"github.com/pbfs/pbfs/internal/etcdtest"
	"github.com/pbfs/pbfs/internal/fstest"
)

// node is one `pbfs node` process. Its name and paths never change, so
// the writer's goroutine may read them; its process and state belong to
// the sweep's goroutine.
type node struct {
	name, vol, jdir, addr, logPath string
	cmd                            *exec.Cmd
	frozen                         bool
}

// running reports whether the node's process is up (it may be frozen).
func (nd *node) running() bool { return nd.cmd != nil && nd.cmd.ProcessState == nil }

// cluster is an etcd cluster and the `pbfs node` processes on it.
type cluster struct {
	t           testing.TB
	bin         string
	etcd        *etcdtest.Cluster
	etcdMembers int
	cli         *clientv3.Client
	nodes       []*node
	nodeArgs    []string
}

// startCluster starts etcd with members members and n nodes with their
// volumes, journals and logs in dir.
func startCluster(t testing.TB, bin, dir string, members, n int, nodeArgs []string) *cluster {
	c := &cluster{t: t, bin: bin, etcd: etcdtest.Start(t, members), etcdMembers: members, nodeArgs: nodeArgs}
	eps := strings.Split(strings.TrimPrefix(c.etcd.Endpoints(), "etcd://"), ",")
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	c.cli = cli
	for i := 0; i < n; i++ {
		nd := &node{name: fmt.Sprintf("n%d", i), vol: filepath.Join(dir, fmt.Sprintf("vol%d", i)),
			jdir: filepath.Join(dir, fmt.Sprintf("j%d", i)), addr: fstest.FreeAddr(t), logPath: filepath.Join(dir, fmt.Sprintf("n%d.log", i))}
		if err := os.MkdirAll(nd.vol, 0o755); err != nil {
			t.Fatalf("start %s: %v", nd.name, err)
		}
		c.nodes = append(c.nodes, nd)
		c.start(nd)
	}
	t.Cleanup(c.shutdown)
	return c
}

// start (re)starts nd; its log is appended to.
func (c *cluster) start(nd *node) {
	lf, err := os.OpenFile(nd.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatalf("start %s: %v", nd.name, err)
	}
	defer lf.Close()
	fmt.Fprintf(lf, "==== faultsweep: start %s at %s\n", nd.name, time.Now().Format(time.RFC3339Nano))
	args := []string{"node", "--coordinator", c.etcd.Endpoints(), "--name", nd.name, "--listen", nd.addr,
		"--journal", nd.jdir, "--token", fstest.TestToken, "--seal-interval", "10ms"}
	nd.cmd = exec.Command(c.bin, append(append(args, c.nodeArgs...), nd.vol)...)
	nd.cmd.Stdout, nd.cmd.Stderr = lf, lf
	nd.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := nd.cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", nd.name, err)
	}
	nd.frozen = false
}

// kill kills nd with SIGKILL, as a crash would.
func (c *cluster) kill(nd *node) {
	if nd.running() {
		nd.cmd.Process.Kill()
		nd.cmd.Wait()
	}
}

// stop stops nd as an operator would (SIGTERM: a primary steps down).
func (c *cluster) stop(nd *node) {
	fstest.StopProcess(nd.cmd, syscall.SIGTERM, 20*time.Second)
}

func (c *cluster) freeze(nd *node) {
	fstest.Freeze(c.t, nd.cmd.Process)
	nd.frozen = true
}

func (c *cluster) thaw(nd *node) {
	fstest.Thaw(nd.cmd.Process)
	nd.frozen = false
}

// shutdown thaws and stops every node and detaches what they left
// mounted.
func (c *cluster) shutdown() {
	for _, nd := range c.nodes {
		if nd.running() {
			c.thaw(nd)
			fstest.StopProcess(nd.cmd, syscall.SIGINT, 20*time.Second)
		}
		fstest.DetachAll(nd.vol)
	}
}

// status asks a running, unfrozen node for its control socket's status.
func (c *cluster) status(nd *node) (control.Status, bool) {
	if !nd.running() || nd.frozen {
		return control.Status{}, false
	}
	return nodeStatus(nd)
}

// nodeStatus asks nd's control socket, within a second.
func nodeStatus(nd *node) (control.Status, bool) {
	cl, err := control.Dial(nd.jdir)
	if err != nil {
		return control.Status{}, false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := cl.Status(ctx)
	return st, err == nil
}

// primaries lists the nodes that say they are the primary.
func (c *cluster) primaries() []*node {
	var out []*node
	for _, nd := range c.nodes {
		if st, ok := c.status(nd); ok && st.Role == "primary" {
			out = append(out, nd)
		}
	}
	return out
}

// leaderName is the node etcd's leader key names ("" when none or etcd
// does not answer).
func (c *cluster) leaderName() string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := c.cli.Get(ctx, "/pbfs/default/leader")
	if err != nil || len(resp.Kvs) == 0 {
		return ""
	}
	var l coord.Leader
	json.Unmarshal(resp.Kvs[0].Value, &l)
	return l.Name
}

// others are the nodes but nd.
func (c *cluster) others(nd *node) []*node {
	var out []*node
	for _, o := range c.nodes {
		if o != nd {
			out = append(out, o)
		}
	}
	return out
}
