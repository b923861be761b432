package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/pbfs/pbfs/plugins/sdk"
)

// Check grades the server's settings for replication under pbfs; each
// finding says why. docs/PLUGINS.md gives the measurements behind the
// recommendations.
func (h *Hint) Check(_ context.Context, env sdk.HintEnv) ([]sdk.Finding, error) {
	s, err := load(env)
	if err != nil {
		return nil, err
	}
	return s.check(), nil
}

func (s *server) check() []sdk.Finding {
	var out []sdk.Finding
	add := func(sev sdk.Severity, setting, value, format string, args ...any) {
		out = append(out, sdk.Finding{Severity: sev, Setting: setting, Value: value, Message: fmt.Sprintf(format, args...)})
	}
	direct := s.fsync == sdk.FsyncReplicated || s.fsync == sdk.FsyncBoth
	switch {
	case s.fsync == sdk.FsyncDeferred:
		add(sdk.SeverityInfo, "fsync", s.fsync.String(), "deferred: the server's fsyncs return at once and sync nothing, and a COMMIT is durable on the backups only once a barrier covers it. Right when every client goes through the HTTP proxy, which holds each response for a barrier (output commit); wrong for direct database clients, whose commits are then durable nowhere when they return: use fsync=replicated for those")
	case s.data == sdk.FsyncDeferred:
		add(sdk.SeverityInfo, "fsync-data", s.data.String(), "deferred: fsyncs of the data files return at once; the commit files' fsyncs (fsync=%s) and the proxy's barriers cover their writes, which reach the backups in order", s.fsync)
	}
	switch v := s.opts.get("innodb_flush_log_at_trx_commit", "1"); v {
	case "1", "3":
		if direct {
			add(sdk.SeverityOK, "innodb_flush_log_at_trx_commit", v, "every commit writes and fsyncs the redo log, and that fsync is a barrier (fsync=%s): a COMMIT returns once it is durable on the ack set", s.fsync)
		} else {
			add(sdk.SeverityOK, "innodb_flush_log_at_trx_commit", v, "every commit writes its redo record before it returns, so a barrier taken after it (the HTTP proxy's output commit) covers it; direct database clients get replicated commits only with fsync=replicated or both")
		}
	case "2":
		sev := sdk.SeverityInfo
		if direct {
			sev = sdk.SeverityError
		}
		add(sev, "innodb_flush_log_at_trx_commit", v, "commits write the redo log but fsync it once a second: a response held for a barrier (output commit) is still covered, but a COMMIT returns before any fsync, so with fsync=%s direct clients' commits are not replicated when they return; use 1", s.fsync)
	default:
		add(sdk.SeverityError, "innodb_flush_log_at_trx_commit", v, "the redo log is written about once a second, not at commit: a commit returns before its log write reaches the volume, so no barrier covers it and an acknowledged transaction can be lost in a failover; use 1")
	}
	if s.opts.on("log_bin", false) {
		switch v := s.opts.get("sync_binlog", "0"); {
		case v == "1" && direct:
			add(sdk.SeverityOK, "sync_binlog", v, "the binary log is fsynced at every group commit, so with fsync=%s its fsync is the commit's barrier", s.fsync)
		case v == "1":
			add(sdk.SeverityOK, "sync_binlog", v, "the binary log is fsynced at every group commit; with fsync=%s that fsync takes no barrier, and the proxy's output commit covers the commit", s.fsync)
		case direct:
			add(sdk.SeverityError, "sync_binlog", v, "with the binary log on, a commit's last write is its binlog event, and sync_binlog=%s follows it with no fsync: no barrier covers it, and a promoted copy rolls the transaction back; use sync_binlog=1", v)
		default:
			add(sdk.SeverityInfo, "sync_binlog", v, "no fsync after the binlog event: covered by output commit only; use 1 for direct clients")
		}
	}
	dw := s.opts.get("innodb_doublewrite", "1")
	if s.opts.on("innodb_doublewrite", true) {
		add(sdk.SeverityInfo, "innodb_doublewrite", dw, "not needed for failover under pbfs: every page write is captured whole and backups apply whole writes in order (a torn apply resumes exactly), and a primary whose machine crashed is resynced, never served again as it is. Turning it off (innodb_doublewrite=0) halves the page-flush bytes every barrier ships; keep it if this server may restart on its own disk after a power loss without pbfs")
	} else {
		add(sdk.SeverityOK, "innodb_doublewrite", dw, "off: fine under pbfs with backups (see the on case); after a power loss, restart from a backup (pbfs promote), not from this disk")
	}
	switch m := strings.ToUpper(s.opts.get("innodb_flush_method", "O_DIRECT")); m {
	case "O_DIRECT", "O_DIRECT_NO_FSYNC":
		add(sdk.SeverityOK, "innodb_flush_method", m, "page writes bypass the page cache: each is one FUSE write, captured as it lands; the redo log's fsyncs still reach pbfs")
	case "O_DSYNC":
		add(sdk.SeverityInfo, "innodb_flush_method", m, "log writes are synchronous writes; the kernel sends pbfs a fsync after each, so they take the log's fsync policy like explicit fsyncs")
	default:
		add(sdk.SeverityOK, "innodb_flush_method", m, "buffered writes: captured when the kernel hands them to pbfs, at the latest at the fsync that makes them durable")
	}
	for _, key := range []string{"innodb_log_group_home_dir", "innodb_data_home_dir", "innodb_undo_directory", "aria_log_dir_path", "log_bin"} {
		v := s.opts.get(key, "")
		if v == "" || v == "1" || v == "0" || key == "log_bin" && !strings.Contains(v, "/") {
			continue
		}
		if _, ok := s.inVolume(v); !ok {
			add(sdk.SeverityError, key, v, "outside the pbfs volume %s: these files are not replicated, and a promoted copy would lack them", s.volume)
		}
	}
	if p, ok := s.pathSetting("tmpdir"); ok {
		add(sdk.SeverityInfo, "tmpdir", p, "inside the volume: made local-only, never shipped")
	}
	return out
}
