package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	"github.com/pbfs/pbfs/internal/mariadbtest"
)

// The semisync scenario is the peer users would pick instead of pbfs:
// MariaDB's own semi-synchronous replication to two replicas, the primary
// waiting after syncing its binary log (AFTER_SYNC) until a replica has
// each transaction in its relay log; the timeout is a day, so it never
// falls back to asynchronous. Every data directory is a plain one.
var (
	semisyncPrimary = []string{"--server-id=1", "--log-bin=mysql-bin", "--sync-binlog=1",
		"--rpl-semi-sync-master-enabled=1", "--rpl-semi-sync-master-wait-point=AFTER_SYNC", "--rpl-semi-sync-master-timeout=86400000"}
	semisyncReplica = []string{"--relay-log=relay-bin", "--rpl-semi-sync-slave-enabled=1"}
)

// databases is the site's MariaDB: one server, or a semi-sync primary
// with its replicas.
type databases struct {
	primary  *mariadbtest.Server
	replicas []*mariadbtest.Server
}

// installDB runs mariadb-install-db on an empty data directory.
func installDB(datadir string) error {
	if err := os.MkdirAll(datadir, 0o755); err != nil {
		return err
	}
	install := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+datadir, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve")
	if out, err := install.CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb-install-db: %v\n%s", err, out)
	}
	return nil
}

var dbOptions = []string{"--innodb-buffer-pool-size=128M"}

// startDatabases starts one server on datadir, or with replicas > 0 a
// semi-sync primary there and its replicas beside it, replicating before
// anything is written.
func startDatabases(ctx context.Context, run, datadir string, replicas int) (*databases, error) {
	d := &databases{}
	if err := installDB(datadir); err != nil {
		return d, err
	}
	if replicas == 0 {
		var err error
		d.primary, err = mariadbtest.StartErr(run, datadir, dbOptions...)
		return d, err
	}
	pport, err := d.startSemisyncPrimary(ctx, run, datadir)
	if err != nil {
		return d, err
	}
	for i := 0; i < replicas; i++ {
		if err := d.startReplica(ctx, run, i, pport); err != nil {
			return d, err
		}
	}
	return d, d.waitSemisync(ctx, replicas)
}

// freePort is a free TCP port on the loopback.
func freePort() (int, error) {
	addr, err := benchproc.FreeAddr()
	if err != nil {
		return 0, err
	}
	_, p, _ := net.SplitHostPort(addr)
	return strconv.Atoi(p)
}

// tcpArgs are mariadbd's options to listen on the loopback's port p.
func tcpArgs(p int) []string {
	return []string{"--skip-networking=0", "--bind-address=127.0.0.1", "--port=" + strconv.Itoa(p)}
}

// startSemisyncPrimary starts the semi-sync primary on datadir with a
// user for the replicas, and returns its port.
func (d *databases) startSemisyncPrimary(ctx context.Context, run, datadir string) (int, error) {
	pport, err := freePort()
	if err != nil {
		return 0, err
	}
	args := append(append(append([]string{}, dbOptions...), tcpArgs(pport)...), semisyncPrimary...)
	if d.primary, err = mariadbtest.StartErr(run, datadir, args...); err != nil {
		return 0, err
	}
	conn, err := d.primary.DB.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	for _, q := range []string{"SET sql_log_bin=0", "CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY 'repl'",
		"GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1'", "SET sql_log_bin=1"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return 0, fmt.Errorf("%s: %w", q, err)
		}
	}
	return pport, nil
}

// startReplica starts replica i in run/replica<i> and has it replicate
// from the primary on pport.
func (d *databases) startReplica(ctx context.Context, run string, i, pport int) error {
	rdir := filepath.Join(run, fmt.Sprintf("replica%d", i))
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return err
	}
	if err := installDB(filepath.Join(rdir, "data")); err != nil {
		return err
	}
	rport, err := freePort()
	if err != nil {
		return err
	}
	rargs := append(append(append([]string{}, dbOptions...), tcpArgs(rport)...), semisyncReplica...)
	rargs = append(rargs, "--server-id="+strconv.Itoa(i+2))
	r, err := mariadbtest.StartErr(rdir, filepath.Join(rdir, "data"), rargs...)
	if err != nil {
		return err
	}
	d.replicas = append(d.replicas, r)
	for _, q := range []string{fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='repl', MASTER_PASSWORD='repl', MASTER_USE_GTID=slave_pos", pport),
		"START SLAVE"} {
		if _, err := r.DB.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("replica %d: %s: %w", i, q, err)
		}
	}
	return nil
}

// waitSemisync waits up to 60 s until the primary's semi-sync is on with
// all its replicas as clients.
func (d *databases) waitSemisync(ctx context.Context, replicas int) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		var status, clients string
		var name string
		err1 := d.primary.DB.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_status'").Scan(&name, &status)
		err2 := d.primary.DB.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'").Scan(&name, &clients)
		if err1 == nil && err2 == nil && status == "ON" && clients == strconv.Itoa(replicas) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("semi-sync not up with %d replicas in 60 s (status %q, clients %q; %v %v)", replicas, status, clients, err1, err2)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cpu is the CPU the primary and the replicas used so far.
func (d *databases) cpu() (primary, replicas benchproc.CPU) {
	if d.primary != nil {
		primary = benchproc.GroupCPU(d.primary.Pid())
	}
	for _, r := range d.replicas {
		replicas = replicas.Plus(benchproc.GroupCPU(r.Pid()))
	}
	return primary, replicas
}

// converged waits until every replica has applied what the primary wrote
// and compares the wordpress tables' checksums.
func (d *databases) converged(ctx context.Context) error {
	if len(d.replicas) == 0 {
		return nil
	}
	var pos string
	if err := d.primary.DB.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		return err
	}
	sum := func(s *mariadbtest.Server) (string, error) {
		rows, err := s.DB.QueryContext(ctx, "CHECKSUM TABLE wordpress.wp_posts, wordpress.wp_postmeta, wordpress.wp_options")
		if err != nil {
			return "", err
		}
		defer rows.Close()
		var out string
		for rows.Next() {
			var t string
			var c any
			if err := rows.Scan(&t, &c); err != nil {
				return "", err
			}
			out += fmt.Sprintf("%s=%v ", t, c)
		}
		return out, rows.Err()
	}
	want, err := sum(d.primary)
	if err != nil {
		return err
	}
	for i, r := range d.replicas {
		var res int
		if err := r.DB.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, 300)", pos).Scan(&res); err != nil || res != 0 {
			return fmt.Errorf("replica %d did not reach %s: %v (%d)", i, pos, err, res)
		}
		got, err := sum(r)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("replica %d differs from the primary: %s against %s", i, got, want)
		}
	}
	return nil
}

// stop stops the replicas, then the primary.
func (d *databases) stop() []error {
	var errs []error
	for _, r := range d.replicas {
		if err := r.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("replica: %w", err))
		}
	}
	if d.primary != nil {
		if err := d.primary.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("mariadbd: %w", err))
		}
	}
	return errs
}
