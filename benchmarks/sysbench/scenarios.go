package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
	report_ "github.com/pbfs/pbfs/benchmarks/internal/report"
)

// row is one measured run: a workload in a scenario (or a tuning variant).
type row struct {
	scenario, workload string
	r                  sbResult
	failed             string
	pbfs               bool
	backups            int
	d                  map[string]float64 // pbfs metric deltas over the run
	binlog             int64              // semisync: binary log bytes over the run
	yesTx, noTx        int64              // semisync: semi-sync transactions over the run
	checks             []string
}

func (r *row) perTx(v float64) float64 {
	if r.r.txns == 0 {
		return 0
	}
	return v / float64(r.r.txns)
}

// spec is how a pbfs scenario's cluster is set up.
type spec struct {
	backups  int
	ack      string        // --ack, with backups
	ackLevel string        // --ack-level; empty: the default (disk)
	plugin   bool          // mysql-hint with fsync=replicated
	delay    time.Duration // added each way on every backup's link
}

// pbfsScenarios are the scenarios with the data directory on a pbfs mount.
var pbfsScenarios = map[string]spec{
	"pbfs-0":                   {},
	"pbfs-1-replicated":        {backups: 1, ack: "all", plugin: true},
	"pbfs-2-replicated":        {backups: 2, ack: "all", plugin: true},
	"pbfs-2-replicated-delay":  {backups: 2, ack: "all", plugin: true, delay: report_.LinkDelay},
	"pbfs-2-replicated-memory": {backups: 2, ack: "all", ackLevel: "memory", plugin: true},
	"pbfs-2-ack1":              {backups: 2, ack: "1", plugin: true},
	"pbfs-2-ack1-memory":       {backups: 2, ack: "1", ackLevel: "memory", plugin: true},
}

// scenario sets one scenario up, runs every workload on it, checks it and
// tears it down.
func (b *bench) scenario(name string) error {
	switch name {
	case "plain":
		dir := filepath.Join(b.runDir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("plain: %w", err)
		}
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			return fmt.Errorf("statfs %s: %w", dir, err)
		}
		if t := fsName(st.Type); t == "tmpfs" || t == "ramfs" || t == "fuse" {
			return fmt.Errorf("plain: %s is on %s, not the real disk", dir, t)
		}
		b.rep.plainFS = fsName(st.Type)
		s := newServer(name, filepath.Join(dir, "data"), dir, 0)
		if err := b.startServer(s, true); err != nil {
			return err
		}
		for _, w := range b.cfg.workloads {
			b.rep.rows = append(b.rep.rows, b.measure(s, name, w, nil))
		}
		return b.stopServers()
	case "semisync":
		return b.semisync()
	}
	if sp, ok := pbfsScenarios[name]; ok {
		return b.pbfsScenario(name, sp, nil)
	}
	return fmt.Errorf("unknown scenario %q", name)
}

// startServer installs (if install) and starts s, registering it for
// cleanup.
func (b *bench) startServer(s *server, install bool) error {
	if install {
		if err := s.install(b.ctx); err != nil {
			return err
		}
	}
	b.servers = append(b.servers, s)
	return s.start(b.ctx)
}

func (b *bench) stopServers() error {
	var errs []error
	for i := len(b.servers) - 1; i >= 0; i-- {
		errs = append(errs, b.servers[i].stop())
	}
	b.servers = nil
	return errors.Join(errs...)
}

// measure runs one workload and returns its row (for the caller to
// record); around adds the scenario's own measurements and checks.
func (b *bench) measure(s *server, scenario, workload string, around func(rw *row, after bool) error) *row {
	rw := &row{scenario: scenario, workload: workload}
	var fn func(bool) error
	if around != nil {
		fn = func(after bool) error { return around(rw, after) }
	}
	r, err := b.workloadRun(s, scenario, workload, fn)
	rw.r = r
	if err != nil {
		rw.failed = err.Error()
		fmt.Fprintf(os.Stderr, "   %s %s FAILED: %v\n", scenario, workload, err)
	}
	return rw
}

// pbfsAround measures the mount's metrics over a run and checks that the
// backups acked everything at its end.
func (b *bench) pbfsAround(c *cluster) func(rw *row, after bool) error {
	var before map[string]float64
	return func(rw *row, after bool) error {
		m, err := c.metrics(b.ctx)
		if err != nil {
			return err
		}
		if !after {
			before = m
			return nil
		}
		rw.pbfs, rw.backups = true, len(c.Backups)
		rw.d = map[string]float64{}
		for _, k := range []string{"pbfs_capture_write_bytes_total", `pbfs_journal_bytes_total{stage="stored"}`,
			"pbfs_journal_batches_total", "pbfs_replicate_bytes_sent_total", "pbfs_fs_fsync_barrier_seconds_count",
			"pbfs_fs_fsync_barrier_seconds_sum", "pbfs_fs_fsync_barrier_failures_total",
			"pbfs_replicate_barrier_seconds_count", "pbfs_replicate_barrier_seconds_sum"} {
			rw.d[k] = sum(m, k) - sum(before, k)
		}
		last, err := c.checkAcked(b.ctx)
		if err != nil {
			return err
		}
		if len(c.Backups) > 0 {
			rw.checks = append(rw.checks, fmt.Sprintf("after a barrier every backup (%d) acked the last seq %d", len(c.Backups), last))
		}
		if f := rw.d["pbfs_fs_fsync_barrier_failures_total"]; f > 0 {
			return fmt.Errorf("%.0f replicated fsyncs failed (EIO)", f)
		}
		return nil
	}
}

// pbfsScenario runs the workloads with the data directory on a pbfs
// volume (the volume's root) with n backups and --ack ack. With variants (tuning), it
// runs oltp_write_only once per variant instead, restarting the server
// with the variant's options each time.
func (b *bench) pbfsScenario(name string, sp spec, variants []variant) error {
	n := sp.backups
	cnf := filepath.Join(b.runDir, name+"-my.cnf")
	if sp.plugin {
		// The server's options as an option file, for mysql-hint's checks;
		// the server itself starts with --no-defaults and the same options.
		text := "[mysqld]\ndatadir=" + filepath.Join(b.runDir, name, "vol") + "\n" + strings.Join(baseOptions, "\n") + "\n"
		if err := os.WriteFile(cnf, []byte(text), 0o644); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	c, err := b.startCluster(name, sp, cnf)
	if err != nil {
		return err
	}
	b.rep.findings[name] = c.Mount.LogEvents("the service's settings")
	s := newServer(name, c.vol, c.dir, 0)
	if err := b.startServer(s, true); err != nil {
		return b.failPbfs(c, err)
	}
	if variants == nil {
		for _, w := range b.cfg.workloads {
			b.rep.rows = append(b.rep.rows, withLog(c, b.measure(s, name, w, b.pbfsAround(c))))
		}
	} else {
		for i, v := range variants {
			if i > 0 {
				if err := b.stopServers(); err != nil {
					return b.failPbfs(c, err)
				}
				s = newServer(name, c.vol, c.dir, 0, v.options...)
				if err := b.startServer(s, false); err != nil {
					return b.failPbfs(c, err)
				}
			}
			b.rep.tune = append(b.rep.tune, withLog(c, b.measure(s, v.name, "oltp_write_only", b.pbfsAround(c))))
		}
	}
	if err := b.stopServers(); err != nil {
		return b.failPbfs(c, err)
	}
	var checks []string
	if n > 0 {
		last, err := c.waitApplied(b.ctx)
		if err != nil {
			return b.failPbfs(c, err)
		}
		checks = append(checks, fmt.Sprintf("after the server's clean shutdown, every backup (%d) acked and applied the last seq %d", n, last))
	}
	if err := c.StopMount(); err != nil {
		return b.failPbfs(c, err)
	}
	if n > 0 {
		files, bytes, err := c.compareBackups()
		if err != nil {
			return b.failPbfs(c, err)
		}
		checks = append(checks, fmt.Sprintf("each backup's copy equals the primary's data directory: %d files, %.1f MiB, same sizes and contents (local-only %s left out)",
			files, float64(bytes)/(1<<20), strings.Join(localOnly, " ")))
	}
	b.rep.checks[name] = checks
	b.rep.complaints = append(b.rep.complaints, c.Complaints()...)
	return c.stop()
}

// withLog adds the mount's last log lines to a failed run's error.
func withLog(c *cluster, rw *row) *row {
	if rw.failed != "" {
		rw.failed += fmt.Sprintf("\nmount log (%s), last lines:\n%s", benchproc.ShownPath(c.Mount.LogPath), c.Mount.LogTail(20))
	}
	return rw
}

// failPbfs keeps the mount's log tail with the error.
func (b *bench) failPbfs(c *cluster, err error) error {
	b.rep.complaints = append(b.rep.complaints, c.Complaints()...)
	return fmt.Errorf("%w\nmount log (%s), last lines:\n%s", err, benchproc.ShownPath(c.Mount.LogPath), c.Mount.LogTail(20))
}

// variant is one setting changed on pbfs-2-replicated.
type variant struct {
	name    string
	options []string
}

// tuning measures what the settings mysql-hint comments on are worth on
// pbfs-2-replicated, on a fresh cluster, the baseline first and last.
func (b *bench) tuning() error {
	vs := []variant{
		{"baseline", nil},
		{"innodb_doublewrite=0", []string{"innodb_doublewrite=0"}},
		{"innodb_flush_log_at_trx_commit=2", []string{"innodb_flush_log_at_trx_commit=2"}},
		{"innodb_flush_method=fsync", []string{"innodb_flush_method=fsync"}},
		{"baseline again", nil},
	}
	return b.pbfsScenario("tune", pbfsScenarios["pbfs-2-replicated"], vs)
}

// semisync runs the workloads on a primary with two semi-sync replicas.
func (b *bench) semisync() error {
	dir := filepath.Join(b.runDir, "semisync")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("semisync: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	primary := newServer("primary", filepath.Join(dir, "primary-data"), dir, port, primaryOptions...)
	var replicas []*server
	for i := 1; i <= 2; i++ {
		rp, err := freePort()
		if err != nil {
			return err
		}
		replicas = append(replicas, newServer(fmt.Sprintf("replica%d", i), filepath.Join(dir, fmt.Sprintf("replica%d-data", i)), dir, rp,
			append([]string{"server_id=" + strconv.Itoa(i+1)}, replicaOptions...)...))
	}
	for _, s := range append([]*server{primary}, replicas...) {
		if err := b.startServer(s, true); err != nil {
			return err
		}
	}
	if err := startReplication(b.ctx, primary, replicas); err != nil {
		return err
	}
	for _, w := range b.cfg.workloads {
		var bin0 int64
		var v0 map[string]string
		b.rep.rows = append(b.rep.rows, b.measure(primary, "semisync", w, func(rw *row, after bool) error {
			bin, err := primary.binlogBytes(b.ctx)
			if err != nil {
				return err
			}
			v, err := primary.statusVars(b.ctx, "Rpl_semi_sync_master_%")
			if err != nil {
				return err
			}
			if v["Rpl_semi_sync_master_status"] != "ON" || v["Rpl_semi_sync_master_clients"] != "2" {
				return fmt.Errorf("semi-sync not on with 2 clients %s the run: status %s, clients %s",
					map[bool]string{false: "before", true: "after"}[after], v["Rpl_semi_sync_master_status"], v["Rpl_semi_sync_master_clients"])
			}
			if !after {
				bin0, v0 = bin, v
				return nil
			}
			rw.binlog = bin - bin0
			atoi := func(m map[string]string, k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
			rw.yesTx = atoi(v, "Rpl_semi_sync_master_yes_tx") - atoi(v0, "Rpl_semi_sync_master_yes_tx")
			rw.noTx = atoi(v, "Rpl_semi_sync_master_no_tx") - atoi(v0, "Rpl_semi_sync_master_no_tx")
			if rw.yesTx <= 0 || rw.noTx != 0 {
				return fmt.Errorf("semi-sync did not hold: %d yes-transactions, %d no-transactions during the run", rw.yesTx, rw.noTx)
			}
			rw.checks = append(rw.checks, fmt.Sprintf("semi-sync ON with 2 clients before and after; %d yes-tx, 0 no-tx", rw.yesTx))
			lag, err := waitReplicas(b.ctx, primary, replicas)
			if err != nil {
				return err
			}
			want, err := primary.checksums(b.ctx, b.cfg.tables)
			if err != nil {
				return err
			}
			for _, r := range replicas {
				got, err := r.checksums(b.ctx, b.cfg.tables)
				if err != nil {
					return err
				}
				if got != want {
					return fmt.Errorf("%s's tables differ from the primary's:\n%s\nagainst\n%s", r.name, got, want)
				}
			}
			rw.checks = append(rw.checks, fmt.Sprintf("replicas caught up %.1f s after the run; CHECKSUM TABLE equal on all three", lag.Seconds()))
			return nil
		}))
	}
	return b.stopServers()
}

func freePort() (int, error) {
	addr, err := benchproc.FreeAddr()
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	_, p, _ := net.SplitHostPort(addr)
	return strconv.Atoi(p)
}
