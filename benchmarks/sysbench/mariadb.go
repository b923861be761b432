package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
)

const (
	mariadbd      = "/usr/sbin/mariadbd"
	installDB     = "/usr/bin/mariadb-install-db"
	mariadbClient = "/usr/bin/mariadb"
)

// baseOptions are every server's settings besides its paths: Debian's
// defaults (innodb_flush_log_at_trx_commit=1, O_DIRECT, doublewrite on)
// with a 256 MiB buffer pool and redo log.
var baseOptions = []string{"innodb_buffer_pool_size=256M", "innodb_log_file_size=256M"}

// server is one mariadbd: its data directory, and a socket, pid file and
// error log outside it.
type server struct {
	name    string
	datadir string
	dir     string // socket, pid file, logs
	port    int    // 0: no TCP
	options []string
	proc    *benchproc.Proc
}

func newServer(name, datadir, dir string, port int, options ...string) *server {
	return &server{name: name, datadir: datadir, dir: dir, port: port, options: append(append([]string{}, baseOptions...), options...)}
}

func (s *server) sock() string { return filepath.Join(s.dir, s.name+".sock") }

// install runs mariadb-install-db on the (empty) data directory.
func (s *server) install(ctx context.Context) error {
	if err := os.MkdirAll(s.datadir, 0o755); err != nil {
		return fmt.Errorf("install %s: %w", s.name, err)
	}
	argv := []string{"--no-defaults", "--datadir=" + s.datadir, "--user=root", "--auth-root-authentication-method=normal", "--skip-test-db"}
	for _, o := range baseOptions {
		argv = append(argv, "--"+o)
	}
	cmd := exec.CommandContext(ctx, installDB, argv...)
	out, err := cmd.CombinedOutput()
	os.WriteFile(filepath.Join(s.dir, s.name+"-install.log"), out, 0o644)
	if err != nil {
		return fmt.Errorf("mariadb-install-db %s: %w\n%s", s.name, err, tail(string(out), 15))
	}
	return nil
}

// start runs mariadbd and waits until it answers on its socket.
func (s *server) start(ctx context.Context) error {
	argv := []string{mariadbd, "--no-defaults", "--user=root", "--skip-name-resolve", "--datadir=" + s.datadir,
		"--socket=" + s.sock(), "--pid-file=" + filepath.Join(s.dir, s.name+".pid"),
		"--log-error=" + filepath.Join(s.dir, s.name+".err")}
	if s.port == 0 {
		argv = append(argv, "--skip-networking")
	} else {
		argv = append(argv, "--bind-address=127.0.0.1", "--port="+strconv.Itoa(s.port))
	}
	for _, o := range s.options {
		argv = append(argv, "--"+o)
	}
	p, err := benchproc.Start(s.name, filepath.Join(s.dir, s.name+".out"), nil, argv...)
	if err != nil {
		return err
	}
	s.proc = p
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if _, err := s.query(ctx, "SELECT 1"); err == nil {
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("mariadbd %s exited: %v\n%s", s.name, p.Err, s.errTail(20))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("mariadbd %s did not answer within 3 minutes:\n%s", s.name, s.errTail(20))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop shuts the server down (SIGTERM: a clean shutdown) and waits.
func (s *server) stop() error {
	if s == nil || s.proc == nil {
		return nil
	}
	p := s.proc
	s.proc = nil
	if !p.Exited() {
		p.Cmd.Process.Signal(syscall.SIGTERM)
	}
	if err := p.Stop(4 * time.Minute); err != nil {
		return fmt.Errorf("stop %s: %w\n%s", s.name, err, s.errTail(10))
	}
	return nil
}

func (s *server) errTail(n int) string {
	data, _ := os.ReadFile(filepath.Join(s.dir, s.name+".err"))
	return tail(string(data), n)
}

// query runs SQL through the mariadb client and returns its tab-separated
// output without column names.
func (s *server) query(ctx context.Context, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mariadbClient, "--no-defaults", "--socket="+s.sock(), "--user=root", "-N", "-B", "-e", sql)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %q: %w: %s", s.name, sql, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimRight(string(out), "\n"), nil
}

// statusVars returns the global status variables whose names match like.
func (s *server) statusVars(ctx context.Context, like string) (map[string]string, error) {
	out, err := s.query(ctx, "SHOW GLOBAL STATUS LIKE '"+like+"'")
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "\t"); ok {
			vars[k] = v
		}
	}
	return vars, nil
}

// binlogBytes sums the sizes of the server's binary logs.
func (s *server) binlogBytes(ctx context.Context) (int64, error) {
	out, err := s.query(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("SHOW BINARY LOGS: %q: %w", l, err)
		}
		sum += n
	}
	return sum, nil
}

// Semi-synchronous replication: the primary waits, after syncing its
// binary log (AFTER_SYNC), until a replica has the transaction in its
// relay log; the timeout is a day, so it never falls back to async.
var (
	primaryOptions = []string{"server_id=1", "log_bin=mysql-bin", "sync_binlog=1",
		"rpl_semi_sync_master_enabled=1", "rpl_semi_sync_master_wait_point=AFTER_SYNC", "rpl_semi_sync_master_timeout=86400000"}
	replicaOptions = []string{"relay_log=relay-bin", "rpl_semi_sync_slave_enabled=1"}
)

// startReplication points the replicas at the primary and waits until the
// primary counts them all as semi-sync clients with semi-sync on.
func startReplication(ctx context.Context, primary *server, replicas []*server) error {
	if _, err := primary.query(ctx, "SET sql_log_bin=0; CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY 'repl'; GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1'"); err != nil {
		return err
	}
	for _, r := range replicas {
		sql := fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='repl', MASTER_PASSWORD='repl', MASTER_USE_GTID=slave_pos; START SLAVE", primary.port)
		if _, err := r.query(ctx, sql); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		v, err := primary.statusVars(ctx, "Rpl_semi_sync_master_%")
		if err != nil {
			return err
		}
		if v["Rpl_semi_sync_master_status"] == "ON" && v["Rpl_semi_sync_master_clients"] == strconv.Itoa(len(replicas)) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var st []string
			for _, r := range replicas {
				out, _ := r.query(ctx, "SHOW SLAVE STATUS\\G")
				st = append(st, r.name+":\n"+out)
			}
			return fmt.Errorf("semi-sync not up with %d clients within 60 s: status %v\n%s", len(replicas), v, strings.Join(st, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitReplicas waits until every replica has applied what the primary has
// written, and returns how long that took.
func waitReplicas(ctx context.Context, primary *server, replicas []*server) (time.Duration, error) {
	start := time.Now()
	pos, err := primary.query(ctx, "SELECT @@gtid_binlog_pos")
	if err != nil {
		return 0, err
	}
	for _, r := range replicas {
		out, err := r.query(ctx, fmt.Sprintf("SELECT MASTER_GTID_WAIT('%s', 600)", pos))
		if err != nil {
			return 0, err
		}
		if out != "0" {
			st, _ := r.query(ctx, "SHOW SLAVE STATUS\\G")
			return 0, fmt.Errorf("%s did not reach the primary's GTID position %s within 600 s:\n%s", r.name, pos, st)
		}
	}
	return time.Since(start), nil
}

// checksums returns CHECKSUM TABLE of every sbtest table.
func (s *server) checksums(ctx context.Context, tables int) (string, error) {
	var names []string
	for i := 1; i <= tables; i++ {
		names = append(names, fmt.Sprintf("sbtest.sbtest%d", i))
	}
	return s.query(ctx, "CHECKSUM TABLE "+strings.Join(names, ", "))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
