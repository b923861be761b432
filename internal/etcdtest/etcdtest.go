// Package etcdtest starts real etcd clusters for tests: each member an
// embedded etcd (go.etcd.io/etcd/server/v3/embed) in a process of its own
// (testetcd), so a test can kill one, or all.
package etcdtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pbfs/pbfs/internal/fstest"
)

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	members []*member
	initial string
}

type member struct {
	name, dir, client, peer string
	cmd                     *exec.Cmd
	out                     *fstest.Buffer
}

// Start runs an n-member cluster and waits until every member serves.
// It is stopped in Cleanup.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	dir := t.TempDir()
	var initial []string
	for i := 0; i < n; i++ {
		m := &member{name: fmt.Sprintf("etcd%d", i), dir: filepath.Join(dir, fmt.Sprint(i)),
			client: "http://" + fstest.FreeAddr(t), peer: "http://" + fstest.FreeAddr(t)}
		initial = append(initial, m.name+"="+m.peer)
		c.members = append(c.members, m)
	}
	c.initial = strings.Join(initial, ",")
	for i := range c.members {
		c.start(i)
	}
	for i := range c.members {
		c.wait(i)
	}
	t.Cleanup(func() {
		for i := range c.members {
			c.Stop(i)
		}
	})
	return c
}

func (c *Cluster) start(i int) {
	m := c.members[i]
	m.out = &fstest.Buffer{}
	m.cmd = exec.Command(fstest.Build(c.t, "github.com/pbfs/pbfs/internal/etcdtest/testetcd"), m.name, m.dir, m.client, m.peer, c.initial)
	m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
	if err := m.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Cluster) wait(i int) {
	m := c.members[i]
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(m.out.String(), "ready"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.t.Fatalf("etcd member %d did not come up:\n%s", i, m.out)
		}
	}
}

// Endpoints is the cluster as pbfs node's --coordinator takes it.
func (c *Cluster) Endpoints() string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, strings.TrimPrefix(m.client, "http://"))
	}
	return "etcd://" + strings.Join(eps, ",")
}

// Leader is the index of the member etcd's leader is, asked of cli.
func (c *Cluster) Leader(cli *clientv3.Client) int {
	c.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, m := range c.members {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cli.Status(ctx, strings.TrimPrefix(m.client, "http://"))
			cancel()
			if err != nil || st.Leader == 0 {
				continue
			}
			for i, o := range c.members {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				ost, err := cli.Status(ctx, strings.TrimPrefix(o.client, "http://"))
				cancel()
				if err == nil && ost.Header.MemberId == st.Leader {
					return i
				}
			}
		}
	}
	c.t.Fatal("etcd has no leader")
	return -1
}

// Process is member i's process (to freeze it, say).
func (c *Cluster) Process(i int) *os.Process { return c.members[i].cmd.Process }

// Kill kills member i with SIGKILL.
func (c *Cluster) Kill(i int) {
	m := c.members[i]
	if m.cmd != nil && m.cmd.ProcessState == nil {
		m.cmd.Process.Kill()
		m.cmd.Wait()
	}
}

// Restart starts members again on their data (after Kill or Stop), and
// waits until they serve (a member waits for a quorum to).
func (c *Cluster) Restart(members ...int) {
	for _, i := range members {
		c.start(i)
	}
	for _, i := range members {
		c.wait(i)
	}
}

// Stop stops member i.
func (c *Cluster) Stop(i int) {
	fstest.StopProcess(c.members[i].cmd, syscall.SIGTERM, 10*time.Second)
}
