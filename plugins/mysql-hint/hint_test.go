package main

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pbfs/pbfs/internal/mariadbtest"
	"github.com/pbfs/pbfs/plugins/sdk"
)

// want is the class a data directory's file must get.
type want struct {
	local bool
	fsync sdk.FsyncPolicy
}

// The rules against a real data directory: MariaDB installed into the
// volume, run with the binary, general and slow logs on and its pid file
// in the data directory, then stopped (which dumps the buffer pool). Every
// file it made gets a rule, and the ones that matter get the right one.
func TestRulesClassifyARealDataDirectory(t *testing.T) {
	mariadbtest.Require(t)
	vol := filepath.Join(t.TempDir(), "vol")
	datadir := filepath.Join(vol, "db")
	mariadbtest.Install(t, datadir)
	h := &Hint{}
	rules, err := h.Rules(context.Background(), sdk.HintEnv{Volume: vol, Config: sdk.Config{
		"datadir": datadir, "fsync": "replicated", "fsync-data": "local",
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := mariadbtest.Start(t, datadir, "--log-bin=mysql-bin", "--general-log=1", "--slow-query-log=1",
		"--pid-file="+filepath.Join(datadir, "host.pid"), "--innodb-buffer-pool-dump-at-shutdown=1")
	if _, err := srv.DB.Exec("CREATE DATABASE app"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.DB.Exec("CREATE TABLE app.t (id INT PRIMARY KEY, v TEXT) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.DB.Exec("CREATE TABLE app.a (id INT PRIMARY KEY) ENGINE=Aria"); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	walk := func() {
		filepath.WalkDir(vol, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(vol, p)
				seen[rel] = true
			}
			return nil
		})
	}
	walk() // while running: ibtmp1, the pid file
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	walk() // after: ib_buffer_pool, mysql-bin.state
	table := map[string]want{
		"db/ibdata1":           {fsync: sdk.FsyncLocal},
		"db/ib_logfile0":       {fsync: sdk.FsyncReplicated},
		"db/ddl_recovery.log":  {fsync: sdk.FsyncReplicated},
		"db/aria_log_control":  {fsync: sdk.FsyncReplicated},
		"db/aria_log.00000001": {fsync: sdk.FsyncReplicated},
		"db/mysql-bin.000001":  {fsync: sdk.FsyncReplicated},
		"db/mysql-bin.index":   {fsync: sdk.FsyncReplicated},
		"db/app/t.ibd":         {fsync: sdk.FsyncLocal},
		"db/app/t.frm":         {fsync: sdk.FsyncLocal},
		"db/app/a.MAI":         {fsync: sdk.FsyncLocal},
		"db/mysql/user.frm":    {fsync: sdk.FsyncLocal},
		"db/ibtmp1":            {local: true},
		"db/host.pid":          {local: true},
		"db/ib_buffer_pool":    {local: true},
	}
	for p, w := range table {
		if !seen[p] {
			t.Errorf("MariaDB made no %s (the table needs updating for this version?)", p)
			continue
		}
		got, ok := sdk.Match(rules, p)
		if !ok || got.LocalOnly != w.local || !w.local && got.Fsync != w.fsync {
			t.Errorf("%s: %+v (matched %v), want local=%v fsync=%v", p, got, ok, w.local, w.fsync)
		}
	}
	var general, slow bool
	for p := range seen {
		got, ok := sdk.Match(rules, p)
		if !ok {
			t.Errorf("%s: no rule", p)
		}
		if strings.HasSuffix(p, "-slow.log") {
			slow = got.LocalOnly
		} else if strings.HasSuffix(p, ".log") && !strings.HasSuffix(p, "ddl_recovery.log") {
			general = got.LocalOnly
		}
	}
	if !general || !slow {
		t.Errorf("general log local-only %v, slow log local-only %v; files %v", general, slow, seen)
	}
	// Classify answers as the rules do.
	hints, _ := h.Classify(context.Background(), []string{"db/ibtmp1", "db/ib_logfile0"})
	if !hints[0].LocalOnly || hints[1].Fsync != sdk.FsyncReplicated {
		t.Errorf("classify: %+v", hints)
	}
}

// The plugin refuses what it cannot classify.
func TestRulesRefuseBadConfig(t *testing.T) {
	for name, cfg := range map[string]sdk.Config{
		"datadir off the volume": {"datadir": "/elsewhere"},
		"unknown key":            {"datadri": "/vol"},
		"bad policy":             {"fsync": "sometimes"},
		"missing option file":    {"defaults-file": "/nonexistent/my.cnf"},
	} {
		if _, err := (&Hint{}).Rules(context.Background(), sdk.HintEnv{Volume: "/vol", Config: cfg}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Checks against option files: each setting that matters gets the
// severity its effect under pbfs deserves.
func TestCheckFindings(t *testing.T) {
	for _, c := range []struct {
		name, cnf, fsync string
		want             map[string]sdk.Severity
	}{
		{"defaults, proxy", "", "default", map[string]sdk.Severity{
			"innodb_flush_log_at_trx_commit": sdk.SeverityOK, "innodb_doublewrite": sdk.SeverityInfo, "innodb_flush_method": sdk.SeverityOK}},
		{"lazy log", "innodb_flush_log_at_trx_commit=0", "default", map[string]sdk.Severity{"innodb_flush_log_at_trx_commit": sdk.SeverityError}},
		{"log once a second, proxy", "innodb_flush_log_at_trx_commit=2", "local", map[string]sdk.Severity{"innodb_flush_log_at_trx_commit": sdk.SeverityInfo}},
		{"log once a second, direct", "innodb_flush_log_at_trx_commit=2", "replicated", map[string]sdk.Severity{"innodb_flush_log_at_trx_commit": sdk.SeverityError}},
		{"binlog unsynced, direct", "log-bin\nsync_binlog=0", "replicated", map[string]sdk.Severity{"sync_binlog": sdk.SeverityError}},
		{"binlog synced", "log-bin=mysql-bin\nsync-binlog=1", "replicated", map[string]sdk.Severity{"sync_binlog": sdk.SeverityOK}},
		{"doublewrite off", "skip-innodb-doublewrite", "replicated", map[string]sdk.Severity{"innodb_doublewrite": sdk.SeverityOK}},
		{"redo log elsewhere", "innodb_log_group_home_dir=/var/log/redo", "replicated", map[string]sdk.Severity{"innodb_log_group_home_dir": sdk.SeverityError}},
		{"tmpdir inside", "tmpdir=/vol/tmp", "local", map[string]sdk.Severity{"tmpdir": sdk.SeverityInfo}},
		{"deferred, proxy", "", "deferred", map[string]sdk.Severity{"fsync": sdk.SeverityInfo, "innodb_flush_log_at_trx_commit": sdk.SeverityOK}},
		{"binlog synced, deferred", "log-bin\nsync_binlog=1", "deferred", map[string]sdk.Severity{"sync_binlog": sdk.SeverityOK, "fsync": sdk.SeverityInfo}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "my.cnf")
			os.WriteFile(p, []byte("[mysqld]\n"+c.cnf+"\n"), 0o644)
			findings, err := (&Hint{}).Check(context.Background(), sdk.HintEnv{Volume: "/vol", Config: sdk.Config{"defaults-file": p, "fsync": c.fsync}})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]sdk.Severity{}
			for _, f := range findings {
				got[f.Setting] = f.Severity
				if f.Message == "" {
					t.Errorf("%s: no explanation", f.Setting)
				}
				if c.fsync != "replicated" && c.fsync != "both" && strings.Contains(f.Message, "the commit's barrier") {
					t.Errorf("%s: with fsync=%s no fsync is a barrier, yet: %s", f.Setting, c.fsync, f.Message)
				}
			}
			for k, w := range c.want {
				if g, ok := got[k]; !ok || g != w {
					t.Errorf("%s: %v (present %v), want %v; all %v", k, g, ok, w, findings)
				}
			}
		})
	}
}
