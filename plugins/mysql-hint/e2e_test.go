package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/mariadbtest"
)

// MariaDB on pbfs end to end: the data directory on a primary mount with
// two backups and the mysql-hint plugin; clients write rows and keep a
// ledger of the ones they saw committed; at a random moment the primary
// machine is lost (kill -9 of pbfs, MariaDB and the proxy); the most
// current backup is promoted and MariaDB started on its copy: it must
// recover, pass CHECK TABLE and hold every acknowledged row. The
// local-only files (the pid file, ibtmp1) never reach a backup, and the
// promoted MariaDB starts without them.
//
// PBFS_MARIADB_ROUNDS sets the kill points per test (default 2);
// DEVELOPERS.md gives the longer run.

func rounds(t *testing.T) int {
	n, err := strconv.Atoi(os.Getenv("PBFS_MARIADB_ROUNDS"))
	if err != nil || n < 1 {
		return 2
	}
	return n
}

// Through the HTTP proxy: a row is acknowledged when the proxy released
// its 200, after a barrier that covers the commit (output commit). The
// rounds take turns with the fsync policies meant for a service behind
// the proxy: local, and deferred (MariaDB's fsyncs return at once, and
// only the proxy's barriers make its commits durable).
func TestMariaDBFailoverThroughProxy(t *testing.T) {
	mariadbtest.Require(t)
	hint := fstest.Build(t, "github.com/pbfs/pbfs/plugins/mysql-hint")
	proxy := fstest.Build(t, "github.com/pbfs/pbfs/plugins/http-proxy")
	for r := range rounds(t) {
		policy := []string{"local", "deferred"}[r%2]
		t.Run(fmt.Sprintf("round%d-%s", r, policy), func(t *testing.T) { proxyRound(t, hint, proxy, policy) })
	}
}

func proxyRound(t *testing.T, hint, proxy, policy string) {
	var db atomic.Pointer[rowService]
	upstream := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { db.Load().ServeHTTP(w, r) }))
	addr := fstest.FreeAddr(t)
	hintArgs := []string{"--plugin", "mysql=" + hint, "--plugin-config", "mysql:fsync=" + policy}
	c := fstest.NewClusterCopy(t, 2, func(vol string) { mariadbtest.Install(t, vol) }, true, append(hintArgs,
		"--plugin", "http-proxy="+proxy, "--plugin-config", "http-proxy:listen="+addr+",upstream=http://"+upstream)...)
	srv := startDB(t, c.Vol, c.Primary)
	createLedger(t, srv.DB)
	db.Store(&rowService{db: srv.DB})
	proxyPid := waitProxy(t, c)
	t.Cleanup(func() { fstest.KillHard(proxyPid) })
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(id int) error {
		resp, err := client.Post(fmt.Sprintf("http://%s/row/%d", addr, id), "text/plain", nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	var l ledger
	stop := make(chan struct{})
	wg := runLoad(4, &l, stop, post)
	time.Sleep(time.Duration(500+rand.IntN(2500)) * time.Millisecond)
	if n := c.Primary.Counter("pbfs_fs_fsyncs_deferred_total", ""); (n > 0) != (policy == "deferred") {
		t.Fatalf("fsync=%s, yet %v fsyncs were deferred", policy, n)
	}
	// The primary machine is lost: everything on it dies at once.
	fstest.KillHard(proxyPid)
	srv.Kill()
	c.Primary.Kill()
	close(stop)
	wg.Wait()
	syscall.Unmount(c.Vol, syscall.MNT_DETACH)
	acked := l.ids()
	if len(acked) < 10 {
		t.Fatalf("only %d rows acknowledged before the kill; primary log:\n%s", len(acked), c.Primary.Out)
	}
	for _, b := range c.Backups {
		requireAbsent(t, b.Vol, "host.pid", "ibtmp1")
	}
	p, best := promoteBest(t, c, hintArgs...)
	requireLedger(t, startDB(t, best.Vol, p).DB, acked)
}

// waitProxy waits until the primary runs the http-proxy plugin and
// returns its pid.
func waitProxy(t *testing.T, c *fstest.Cluster) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		st, err := c.Primary.Client().Status(context.Background())
		if err == nil {
			for _, p := range st.Plugins {
				if p.Name == "http-proxy" && p.State == "running" && p.Pid > 0 {
					return p.Pid
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the proxy plugin did not start:\n%s", c.Primary.Out)
	return 0
}

// Direct database clients with the replicated fsync policy, no proxy: a
// row is acknowledged when its INSERT (autocommit) returned, and the
// redo log's fsync that made it durable was a barrier.
func TestMariaDBFailoverReplicatedFsync(t *testing.T) {
	mariadbtest.Require(t)
	hint := fstest.Build(t, "github.com/pbfs/pbfs/plugins/mysql-hint")
	for r := range rounds(t) {
		t.Run(fmt.Sprint("round", r), func(t *testing.T) { directRound(t, hint) })
	}
}

func directRound(t *testing.T, hint string) {
	hintArgs := []string{"--plugin", "mysql=" + hint, "--plugin-config", "mysql:fsync=replicated"}
	c := fstest.NewClusterCopy(t, 2, func(vol string) { mariadbtest.Install(t, vol) }, true, hintArgs...)
	srv := startDB(t, c.Vol, c.Primary)
	createLedger(t, srv.DB)
	srv.DB.SetMaxOpenConns(8)
	fsyncsBefore := c.Primary.Counter("pbfs_fs_fsync_barrier_seconds_count", "")
	insert := func(id int) error {
		ctx, cancel := ctxTimeout(10 * time.Second)
		defer cancel()
		_, err := srv.DB.ExecContext(ctx, "INSERT INTO app.ledger (id, payload) VALUES (?, ?)", id, payload(id))
		return err
	}
	var l ledger
	stop := make(chan struct{})
	wg := runLoad(4, &l, stop, insert)
	time.Sleep(time.Duration(500+rand.IntN(2500)) * time.Millisecond)
	fsyncs := c.Primary.Counter("pbfs_fs_fsync_barrier_seconds_count", "") - fsyncsBefore
	srv.Kill()
	c.Primary.Kill()
	close(stop)
	wg.Wait()
	syscall.Unmount(c.Vol, syscall.MNT_DETACH)
	acked := l.ids()
	if len(acked) < 10 || fsyncs < 10 {
		t.Fatalf("%d rows acknowledged, %v replicated fsyncs before the kill; primary log:\n%s", len(acked), fsyncs, c.Primary.Out)
	}
	t.Logf("%d commits, %v replicated fsyncs (grouped: %.2f fsyncs per commit)", len(acked), fsyncs, fsyncs/float64(len(acked)))
	for _, b := range c.Backups {
		requireAbsent(t, b.Vol, "host.pid", "ibtmp1")
	}
	p, best := promoteBest(t, c, hintArgs...)
	requireLedger(t, startDB(t, best.Vol, p).DB, acked)
	if log := c.Primary.Out.String(); strings.Contains(log, "panic") {
		t.Errorf("the primary panicked:\n%s", log)
	}
}
