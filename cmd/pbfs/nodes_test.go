package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
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

// A test cluster of `pbfs node` processes on a real etcd, and a writer that
// keeps a ledger of every write a barrier acknowledged.

// node is one `pbfs node` process of a test cluster.
type node struct {
	name, vol, jdir, addr, hooks string
	extra                        []string        // more arguments
	coordinator                  string          // its --coordinator, if not the cluster's
	relays                       []*fstest.Relay // its way to etcd (startRelayedNodes)
	cmd                          *exec.Cmd
	out                          *fstest.Buffer
	client                       *control.Client
}

// nodes is a cluster of pbfs nodes on one etcd cluster.
type nodes struct {
	t     *testing.T
	etcd  *etcdtest.Cluster
	cli   *clientv3.Client
	nodes []*node
}

func startNodes(t *testing.T, etcdMembers, n int) *nodes {
	return startNodesWith(t, etcdMembers, n, nil)
}

// startNodesWith starts n nodes; extra, if set, gives a node's extra
// arguments.
func startNodesWith(t *testing.T, etcdMembers, n int, extra func(nd *node) []string) *nodes {
	return startCluster(t, etcdMembers, n, extra, false)
}

// startRelayedNodes starts n nodes that each reach etcd through relays of
// their own, which a test cuts (node.cutCoordinator) to part one node from
// etcd.
func startRelayedNodes(t *testing.T, etcdMembers, n int, extra func(nd *node) []string) *nodes {
	return startCluster(t, etcdMembers, n, extra, true)
}

func startCluster(t *testing.T, etcdMembers, n int, extra func(nd *node) []string, relayed bool) *nodes {
	fstest.RequireFUSE(t)
	c := &nodes{t: t, etcd: etcdtest.Start(t, etcdMembers)}
	eps := strings.Split(strings.TrimPrefix(c.etcd.Endpoints(), "etcd://"), ",")
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	must(t, err)
	t.Cleanup(func() { cli.Close() })
	c.cli = cli
	dir := t.TempDir()
	for i := 0; i < n; i++ {
		nd := &node{name: fmt.Sprintf("n%d", i), vol: filepath.Join(dir, fmt.Sprintf("vol%d", i)),
			jdir: filepath.Join(dir, fmt.Sprintf("j%d", i)), addr: fstest.FreeAddr(t), hooks: filepath.Join(dir, fmt.Sprintf("hooks%d", i))}
		must(t, os.MkdirAll(nd.vol, 0o755))
		must(t, os.MkdirAll(nd.hooks, 0o755))
		if extra != nil {
			nd.extra = extra(nd)
		}
		if relayed {
			var via []string
			for _, ep := range eps {
				r := fstest.StartRelay(t, ep)
				nd.relays = append(nd.relays, r)
				via = append(via, r.Addr())
			}
			nd.coordinator = "etcd://" + strings.Join(via, ",")
		}
		c.nodes = append(c.nodes, nd)
		c.start(nd)
	}
	return c
}

func (c *nodes) start(nd *node) {
	nd.out = &fstest.Buffer{}
	coordinator := c.etcd.Endpoints()
	if nd.coordinator != "" {
		coordinator = nd.coordinator
	}
	nd.cmd = exec.Command(fstest.Binary(c.t), "node", "--coordinator", coordinator, "--name", nd.name,
		"--listen", nd.addr, "--journal", nd.jdir, "--token", fstest.TestToken, "--seal-interval", "10ms",
		"--on-promote", "echo promoted $PBFS_NODE $PBFS_EPOCH >> "+filepath.Join(nd.hooks, "promote"),
		"--on-demote", "echo demoted $PBFS_NODE >> "+filepath.Join(nd.hooks, "demote"))
	nd.cmd.Args = append(append(nd.cmd.Args, nd.extra...), nd.vol)
	nd.cmd.Stdout, nd.cmd.Stderr = nd.out, nd.out
	must(c.t, nd.cmd.Start())
	cmd := nd.cmd
	c.t.Cleanup(func() {
		fstest.StopProcess(cmd, syscall.SIGINT, 20*time.Second)
		if fstest.Mounted(nd.vol) {
			syscall.Unmount(nd.vol, syscall.MNT_DETACH)
		}
	})
}

// cutCoordinator parts nd from etcd (startRelayedNodes), or joins it again.
func (nd *node) cutCoordinator(cut bool) {
	for _, r := range nd.relays {
		if cut {
			r.Cut()
		} else {
			r.Mend()
		}
	}
}

func (c *nodes) kill(nd *node) {
	nd.cmd.Process.Kill()
	nd.cmd.Wait()
}

// awaitRecordGone waits for a killed node's member record to go with its
// lease.
func (c *nodes) awaitRecordGone(nd *node) {
	c.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := c.cli.Get(context.Background(), "/pbfs/default/members/"+nd.name)
		if err == nil && len(resp.Kvs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s's member record outlived it", nd.name)
		}
	}
}

// leader returns the node etcd names the primary and its record, waiting
// for one that serves (its control socket answers a barrier).
func (c *nodes) leader(timeout time.Duration) (*node, coord.Leader) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		// Bounded: a request to a hung etcd member waits for it.
		gctx, gcancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := c.cli.Get(gctx, "/pbfs/default/leader")
		gcancel()
		if err == nil && len(resp.Kvs) > 0 {
			var l coord.Leader
			json.Unmarshal(resp.Kvs[0].Value, &l)
			for _, nd := range c.nodes {
				if nd.name == l.Name && nd.cmd.ProcessState == nil {
					if cl, err := control.Dial(nd.jdir); err == nil {
						ctx, cancel := context.WithTimeout(context.Background(), time.Second)
						_, err := cl.Barrier(ctx)
						cancel()
						cl.Close()
						if err == nil {
							return nd, l
						}
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("no primary serves within %v:\n%s", timeout, c.logs())
	return nil, coord.Leader{}
}

func (c *nodes) logs() string {
	var logs strings.Builder
	for _, nd := range c.nodes {
		fmt.Fprintf(&logs, "== %s:\n%s\n", nd.name, nd.out)
	}
	return logs.String()
}

// writer writes files through whichever node is the primary and keeps a
// ledger of every write a barrier acknowledged.
type writer struct {
	mu    sync.Mutex
	acked map[string]string // path -> content
	// ackedAt records when each barrier returned, per primary.
	lastAck map[string]time.Time
}

// write writes one file on nd's volume and takes a barrier; it reports
// whether the barrier acknowledged it.
func (w *writer) write(nd *node, i int) bool {
	name := fmt.Sprintf("w-%s-%05d", nd.name, i)
	content := fmt.Sprintf("written through %s, #%d", nd.name, i)
	if err := os.WriteFile(filepath.Join(nd.vol, name), []byte(content), 0o644); err != nil {
		return false
	}
	cl, err := control.Dial(nd.jdir)
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := cl.Barrier(ctx); err != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.acked[name] = content
	w.lastAck[nd.name] = time.Now()
	return true
}

// requireLedger checks every acknowledged write on vol.
func (w *writer) requireLedger(t *testing.T, vol string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, content := range w.acked {
		if data, err := os.ReadFile(filepath.Join(vol, name)); err != nil || string(data) != content {
			t.Fatalf("acknowledged write %s lost on %s: %q %v", name, vol, data, err)
		}
	}
}

// converge waits until every live node holds the primary's tree.
func (c *nodes) converge(primary *node) {
	c.t.Helper()
	cl, err := control.Dial(primary.jdir)
	must(c.t, err)
	defer cl.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		seq, err := cl.Barrier(context.Background())
		if err == nil {
			st, _ := cl.Status(context.Background())
			done := 0
			for _, b := range st.Backups {
				if b.Up && b.AppliedSeq >= seq && !b.Stale && !b.Resyncing {
					done++
				}
			}
			if done == len(c.nodes)-1 {
				break
			}
		}
		if time.Now().After(deadline) {
			st, _ := cl.Status(context.Background())
			c.t.Fatalf("the nodes never converged: %+v\n%s", st.Backups, c.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := fstest.Snapshot(c.t, primary.vol)
	for _, nd := range c.nodes {
		if nd != primary {
			fstest.RequireEqual(c.t, want, fstest.Snapshot(c.t, nd.vol), nd.name+" vs primary "+primary.name)
		}
	}
}

// requireStatus checks what pbfs status says after a failover from old to
// primary.
func (c *nodes) requireStatus(primary, old *node) {
	c.t.Helper()
	out, code := run(c.t, "status", "--coordinator", c.etcd.Endpoints(), "--json")
	if code != 0 {
		c.t.Fatalf("status: %s", out)
	}
	var r coord.Report
	must(c.t, json.Unmarshal([]byte(out), &r))
	if r.Leader == nil || r.Leader.Name != primary.name || r.Failover == nil || r.Failover.To != primary.name || r.Failover.From != old.name {
		c.t.Fatalf("status after a failover from %s to %s: %s", old.name, primary.name, out)
	}
	if len(r.Members) != len(c.nodes) || r.LeaseTTL <= 0 || len(r.Lost) > 0 || len(r.Degraded) > 0 {
		c.t.Fatalf("status does not show every node and the lease: %s", out)
	}
	if text, code := run(c.t, "status", "--coordinator", c.etcd.Endpoints()); code != 0 || !strings.Contains(text, "primary  "+primary.name) {
		c.t.Fatalf("status table: %s", text)
	}
}

// requireLost checks that pbfs status lists a killed node as lost, says
// the cluster is degraded and exits 3; and that a mistyped --cluster is
// an error that names the clusters there.
func (c *nodes) requireLost(gone *node) {
	c.t.Helper()
	c.awaitRecordGone(gone)
	out, code := run(c.t, "status", "--coordinator", c.etcd.Endpoints(), "--json")
	var r coord.Report
	if code != 3 || json.Unmarshal([]byte(out), &r) != nil || len(r.Lost) != 1 || r.Lost[0].Name != gone.name || len(r.Degraded) == 0 {
		c.t.Fatalf("status with %s killed: exit %d, want 3 and it listed as lost:\n%s", gone.name, code, out)
	}
	text, code := run(c.t, "status", "--coordinator", c.etcd.Endpoints())
	if code != 3 || !regexp.MustCompile(`(?m)^`+gone.name+` +lost `).MatchString(text) || !strings.Contains(text, "cluster  degraded: 1 of 3 nodes lost") {
		c.t.Fatalf("status table with %s killed: exit %d:\n%s", gone.name, code, text)
	}
	text, code = run(c.t, "status", "--coordinator", c.etcd.Endpoints(), "--cluster", "defualt")
	if code != 1 || !strings.Contains(text, `no such cluster "defualt"`) || !strings.Contains(text, "it holds: default") {
		c.t.Fatalf("status of a mistyped cluster: exit %d:\n%s", code, text)
	}
}

// requireFailoverWaited checks that the failover's record says what
// clients waited: at least from the kill to the new primary's lease, and
// it is there once the new primary acknowledged a write.
func (c *nodes) requireFailoverWaited(killed time.Time) {
	c.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, _ := run(c.t, "status", "--coordinator", c.etcd.Endpoints(), "--json")
		var r coord.Report
		if json.Unmarshal([]byte(out), &r) == nil && r.Failover != nil && r.Failover.Outage > 0 {
			if r.Failover.Outage < r.Failover.Took || r.Failover.Outage > time.Since(killed)+10*time.Second {
				c.t.Fatalf("the failover's outage %v: below its take-over %v, or far above the %v since the kill", r.Failover.Outage, r.Failover.Took, time.Since(killed))
			}
			text, _ := run(c.t, "status", "--coordinator", c.etcd.Endpoints())
			if !strings.Contains(text, "clients waited") {
				c.t.Fatalf("status does not say what clients waited:\n%s", text)
			}
			c.t.Logf("failover: took %v to serve; clients waited %v", r.Failover.Took, r.Failover.Outage)
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the failover's record never said what clients waited: %s", out)
		}
	}
}
