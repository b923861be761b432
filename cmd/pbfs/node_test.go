package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
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

// node is one `pbfs node` process of a test cluster.
type node struct {
	name, vol, jdir, addr, hooks string
	extra                        []string // more arguments
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
		c.nodes = append(c.nodes, nd)
		c.start(nd)
	}
	return c
}

func (c *nodes) start(nd *node) {
	nd.out = &fstest.Buffer{}
	nd.cmd = exec.Command(fstest.Binary(c.t), "node", "--coordinator", c.etcd.Endpoints(), "--name", nd.name,
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

func (c *nodes) kill(nd *node) {
	nd.cmd.Process.Kill()
	nd.cmd.Wait()
}

// leader returns the node etcd names the primary and its record, waiting
// for one that serves (its control socket answers a barrier).
func (c *nodes) leader(timeout time.Duration) (*node, coord.Leader) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if resp, err := c.cli.Get(context.Background(), "/pbfs/default/leader"); err == nil && len(resp.Kvs) > 0 {
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

// TestAutomaticFailover: three nodes on etcd; the primary is killed with
// -9 in the middle of a write load, five times in a row. Each time a
// backup takes over by itself (its promotion hook runs), every
// acknowledged write is on the new primary, the killed node rejoins as a
// backup, and all three end byte-identical. The time from the kill to the
// first write the new primary acknowledges is reported.
func TestAutomaticFailover(t *testing.T) {
	c := startNodes(t, 1, 3)
	w := &writer{acked: map[string]string{}, lastAck: map[string]time.Time{}}
	var took []time.Duration
	for round := 0; round < 5; round++ {
		primary, _ := c.leader(60 * time.Second)
		for i := 0; i < 20; i++ {
			w.write(primary, round*1000+i)
		}
		killed := time.Now()
		c.kill(primary)
		next, l := c.leader(30 * time.Second)
		for i := 0; !w.write(next, round*1000+500+i); i++ {
			if time.Since(killed) > 30*time.Second {
				t.Fatalf("the new primary %s acknowledges nothing", next.name)
			}
		}
		took = append(took, time.Since(killed))
		if l.Epoch < uint64(round+2) {
			t.Fatalf("round %d: the new term's epoch is %d", round, l.Epoch)
		}
		w.requireLedger(t, next.vol)
		if data, _ := os.ReadFile(filepath.Join(next.hooks, "promote")); !strings.Contains(string(data), "promoted "+next.name) {
			t.Fatalf("the promotion hook did not run on %s: %q", next.name, data)
		}
		c.start(primary) // the killed node rejoins as a backup
		c.converge(next)
		c.requireStatus(next, primary)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("kill -9 of the primary to the first write the new one acknowledged: min %v, median %v, max %v (%v)",
		took[0].Round(time.Millisecond), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), took)
	if took[len(took)/2] > 10*time.Second {
		t.Fatalf("failover takes %v (median): too slow", took[len(took)/2])
	}
}

// TestPartitionedPrimaryNeverAcknowledges: the primary is frozen
// (SIGSTOP) while its clients keep asking it for barriers; a backup takes
// over once the lease lapses. When the old primary thaws, no barrier it
// returns succeeds: it may have been deposed. It rejoins as a backup and
// converges.
func TestPartitionedPrimaryNeverAcknowledges(t *testing.T) {
	c := startNodes(t, 1, 3)
	old, _ := c.leader(60 * time.Second)
	w := &writer{acked: map[string]string{}, lastAck: map[string]time.Time{}}
	for i := 0; i < 10; i++ {
		w.write(old, i)
	}
	fstest.Freeze(t, old.cmd.Process)
	stopped := time.Now()
	// Clients keep writing to the frozen primary.
	results := make(chan time.Time, 100)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if w.write(old, 100+i) {
				results <- time.Now()
			}
		}(i)
	}
	next, _ := c.leader(30 * time.Second)
	if next == old {
		t.Fatal("the frozen primary is still the leader")
	}
	w.write(next, 200)
	fstest.Thaw(old.cmd.Process)
	wg.Wait()
	close(results)
	for at := range results {
		t.Fatalf("the frozen primary acknowledged a write %v after it was stopped", at.Sub(stopped))
	}
	w.requireLedger(t, next.vol)
	// It finds out, stops serving, and rejoins as a backup.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(old.out.String(), "deposed"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the old primary never noticed it was deposed:\n%s", old.out)
		}
	}
	c.converge(next)
}

// TestCoordinatorLoss: with three etcd members, losing one changes
// nothing; losing all makes the primary stop acknowledging within its
// lease (it cannot prove it still holds the term); once etcd is back, a
// primary serves again and nothing acknowledged was lost.
func TestCoordinatorLoss(t *testing.T) {
	c := startNodes(t, 3, 2)
	primary, _ := c.leader(60 * time.Second)
	w := &writer{acked: map[string]string{}, lastAck: map[string]time.Time{}}
	for i := 0; i < 5; i++ {
		w.write(primary, i)
	}
	c.etcd.Kill(0)
	time.Sleep(3 * time.Second)
	if !w.write(primary, 10) {
		t.Fatalf("the primary stopped acknowledging with two of three etcd members up:\n%s", primary.out)
	}
	c.etcd.Kill(1)
	c.etcd.Kill(2)
	lost := time.Now()
	var lastOK time.Time
	for time.Since(lost) < 6*time.Second {
		if w.write(primary, 20+int(time.Since(lost)/time.Millisecond)) {
			lastOK = time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !lastOK.IsZero() && lastOK.Sub(lost) > 3*time.Second {
		t.Fatalf("the primary acknowledged %v after etcd was lost, past its 3 s lease", lastOK.Sub(lost))
	}
	c.etcd.Restart(0, 1, 2)
	next, _ := c.leader(60 * time.Second)
	for i := 0; !w.write(next, 5000+i); i++ {
		if i > 100 {
			t.Fatal("no primary acknowledges after etcd came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.requireLedger(t, next.vol)
}

// TestLoneSurvivorAcknowledgesNothing: a backup and then the primary are
// killed; the remaining node takes the term, but with no other member up
// it acknowledges nothing (--min-backups defaults to 1 for a node): had it
// acknowledged on its own disk, and been lost in turn, the killed backup,
// back first, would have been elected without those writes. Once a member
// is back and has caught up, writes are acknowledged again, and held by
// it.
func TestLoneSurvivorAcknowledgesNothing(t *testing.T) {
	c := startNodes(t, 1, 3)
	primary, _ := c.leader(60 * time.Second)
	w := &writer{acked: map[string]string{}, lastAck: map[string]time.Time{}}
	for i := 0; i < 5; i++ {
		w.write(primary, i)
	}
	var survivor, other *node
	for _, nd := range c.nodes {
		if nd != primary && survivor == nil {
			survivor = nd
		} else if nd != primary {
			other = nd
		}
	}
	c.kill(other)
	// Its member record goes with its lease: the survivor is promoted
	// knowing of no other member.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := c.cli.Get(context.Background(), "/pbfs/default/members/"+other.name)
		if err == nil && len(resp.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's member record outlived it", other.name)
		}
	}
	c.kill(primary)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(survivor.out.String(), "serving as the primary"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the survivor never took the term:\n%s", c.logs())
		}
	}
	for i := 0; i < 3; i++ {
		if w.write(survivor, 100+i) {
			t.Fatalf("the lone survivor acknowledged a write on its own disk:\n%s", survivor.out)
		}
	}
	if !strings.Contains(survivor.out.String(), "too few other members are up") {
		t.Fatalf("the survivor did not say why its barriers wait:\n%s", survivor.out)
	}
	c.start(other)
	for i := 0; !w.write(survivor, 200+i); i++ {
		if i > 20 {
			t.Fatalf("no write acknowledged after %s rejoined:\n%s", other.name, c.logs())
		}
	}
	c.start(primary)
	c.converge(survivor)
	w.requireLedger(t, other.vol)
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
	if len(r.Members) != len(c.nodes) || r.LeaseTTL <= 0 {
		c.t.Fatalf("status does not show every node and the lease: %s", out)
	}
	if text, code := run(c.t, "status", "--coordinator", c.etcd.Endpoints()); code != 0 || !strings.Contains(text, "primary  "+primary.name) {
		c.t.Fatalf("status table: %s", text)
	}
}

// TestNodesAdoptAMountsVolume: a volume served by a plain pbfs mount is
// taken over by pbfs node without losing it: in the coordinator's first
// term the node whose journal a mount left is the volume's copy (not a
// deposed primary), it wins the first election over an empty node, and
// the empty one is resynced from it.
func TestNodesAdoptAMountsVolume(t *testing.T) {
	fstest.RequireFUSE(t)
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	must(t, os.Mkdir(vol, 0o755))
	p := startMount(t, nil, vol, jdir)
	must(t, os.WriteFile(filepath.Join(vol, "precious"), []byte("written under pbfs mount"), 0o644))
	p.Barrier()
	p.Stop()
	var adopt *node
	c := startNodesWith(t, 1, 2, func(nd *node) []string {
		if nd.name == "n1" { // n0 sorts first: without the rule, it would win
			nd.vol, nd.jdir, adopt = vol, jdir, nd
		}
		return nil
	})
	primary, _ := c.leader(60 * time.Second)
	if primary != adopt {
		t.Fatalf("%s took the first term over the node holding the mount's volume:\n%s", primary.name, c.logs())
	}
	if data, err := os.ReadFile(filepath.Join(vol, "precious")); err != nil || string(data) != "written under pbfs mount" {
		t.Fatalf("the mount's volume lost its data: %q %v", data, err)
	}
	c.converge(primary)
}

// TestNodeCPUsFollowTheRole: with --cpus, a node runs on those CPUs only
// while it is a backup: the primary runs where it was started, the
// backups pinned; after a failover the new primary is unpinned and the
// old one, restarted as a backup, pinned; and a primary deposed while
// frozen serves on as a backup, pinned again in the same process.
func TestNodeCPUsFollowTheRole(t *testing.T) {
	mine, cpu := pinnableCPU(t)
	c := startNodesWith(t, 1, 3, func(*node) []string { return []string{"--cpus", cpu} })
	// requireCPUs waits until every thread of nd runs on want.
	requireCPUs := func(nd *node, want, role string) {
		t.Helper()
		var wrong []string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			wrong = wrong[:0]
			for tid, list := range cpusOf(t, nd.cmd.Process.Pid) {
				if list != want {
					wrong = append(wrong, fmt.Sprintf("thread %s on %s", tid, list))
				}
			}
			if len(wrong) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(wrong) > 0 {
			t.Fatalf("%s %s: want every thread on CPUs %s: %v", role, nd.name, want, wrong)
		}
	}
	requireRoles := func(primary *node) {
		t.Helper()
		for _, nd := range c.nodes {
			if nd == primary {
				requireCPUs(nd, mine, "primary")
			} else {
				requireCPUs(nd, cpu, "backup")
			}
		}
	}
	primary, _ := c.leader(60 * time.Second)
	c.converge(primary)
	requireRoles(primary)
	c.kill(primary)
	next, _ := c.leader(30 * time.Second)
	c.start(primary) // back as a backup, a new process
	c.converge(next)
	requireRoles(next)
	// The same process going from primary to backup: frozen past its
	// lease, it finds itself deposed when it thaws and serves as a
	// backup, pinned again.
	fstest.Freeze(t, next.cmd.Process)
	third, _ := c.leader(30 * time.Second)
	fstest.Thaw(next.cmd.Process)
	c.converge(third)
	requireRoles(third)
}

// TestNodeSaysCoordinatorUnreachable: a node whose etcd does not answer
// says so in its log, rather than wait in silence.
func TestNodeSaysCoordinatorUnreachable(t *testing.T) {
	fstest.RequireFUSE(t)
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	must(t, os.Mkdir(vol, 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pbfsBin, "node", "--coordinator", "etcd://127.0.0.1:1", "--name", "a", "--listen", "127.0.0.1:0",
		"--advertise", "127.0.0.1:9", "--token", "t", "--journal", filepath.Join(dir, "j"), vol)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "coordinator unreachable") {
		t.Fatalf("no word of the unreachable coordinator in 12 s:\n%s", out)
	}
}
