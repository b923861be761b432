package main

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/pbfs/pbfs/plugins/sdk"
)

// Hint is the plugin.
type Hint struct {
	rules []sdk.Rule // from the last Rules call, for Classify
}

// Info names the plugin.
func (h *Hint) Info() sdk.Info { return sdk.Info{Name: "mysql-hint", Version: "1"} }

// server is what the plugin knows of one server: where its files are and
// the settings that matter, resolved against MariaDB's defaults.
type server struct {
	volume  string // the volume's mountpoint
	datadir string // absolute
	prefix  string // the datadir relative to the volume, with a trailing "/" ("" at the root)
	opts    Options
	fsync   sdk.FsyncPolicy // for commit files (logs)
	data    sdk.FsyncPolicy // for every other file of the data directory
}

// load reads the plugin's configuration: datadir (default: the volume),
// defaults-file (the server's option file, read as the server reads it),
// version (for [mariadb-X.Y] groups), fsync and fsync-data (policies;
// default: the mount's).
func load(env sdk.HintEnv) (*server, error) {
	s := &server{volume: filepath.Clean(env.Volume), opts: Options{}}
	if f := env.Config.String("defaults-file", ""); f != "" {
		o, err := readOptions(f, env.Config.String("version", ""))
		if err != nil {
			return nil, err
		}
		s.opts = o
	}
	s.datadir = filepath.Clean(env.Config.String("datadir", s.opts.get("datadir", s.volume)))
	if s.volume == "." || !filepath.IsAbs(s.volume) {
		return nil, fmt.Errorf("config: the volume %q is not an absolute path", env.Volume)
	}
	rel, ok := s.inVolume(s.datadir)
	if !ok {
		return nil, fmt.Errorf("config: datadir %s is not on the volume %s: nothing of the database would be replicated", s.datadir, s.volume)
	}
	if rel != "" {
		s.prefix = rel + "/"
	}
	for key, dst := range map[string]*sdk.FsyncPolicy{"fsync": &s.fsync, "fsync-data": &s.data} {
		p, err := sdk.ParseFsyncPolicy(env.Config.String(key, "default"))
		if err != nil {
			return nil, fmt.Errorf("config: %s: %w", key, err)
		}
		*dst = p
	}
	if _, set := env.Config["fsync-data"]; !set {
		s.data = s.fsync
	}
	for k := range env.Config {
		switch k {
		case "datadir", "defaults-file", "version", "fsync", "fsync-data":
		default:
			return nil, fmt.Errorf("config: unknown key %q (want datadir, defaults-file, version, fsync, fsync-data)", k)
		}
	}
	return s, nil
}

// inVolume returns p relative to the volume ("" for the volume itself),
// and whether it is on it. Relative paths are relative to the datadir.
func (s *server) inVolume(p string) (string, bool) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.datadir, p)
	}
	rel, err := filepath.Rel(s.volume, filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	if rel == "." {
		rel = ""
	}
	return rel, true
}

// pathSetting returns a setting naming a file, relative to the volume, if
// it is set and on the volume.
func (s *server) pathSetting(name string) (string, bool) {
	v := s.opts.get(name, "")
	if v == "" {
		return "", false
	}
	return s.inVolume(v)
}

// Rules classifies the data directory. Commit files come first: they are
// replicated, and their fsyncs are commits (policy fsync). Then the
// local-only files: what a server makes again at start, describes only
// this machine, or must not follow a failover. Everything else in the
// data directory (tablespaces, undo logs, .frm files, ...) is replicated
// with policy fsync-data.
func (h *Hint) Rules(_ context.Context, env sdk.HintEnv) ([]sdk.Rule, error) {
	s, err := load(env)
	if err != nil {
		return nil, err
	}
	h.rules = s.rules()
	return h.rules, nil
}

func (s *server) rules() []sdk.Rule {
	var out []sdk.Rule
	commit := func(pat, why string) {
		out = append(out, sdk.Rule{Pattern: s.prefix + pat, Hint: sdk.PathHint{Fsync: s.fsync, Reason: why}})
	}
	local := func(pat, why string) {
		out = append(out, sdk.Rule{Pattern: pat, Hint: sdk.PathHint{LocalOnly: true, Reason: why}})
	}
	commit("ib_logfile*", "InnoDB redo log: a commit is durable when its record is")
	commit("#innodb_redo/", "InnoDB redo log (MySQL 8.0.30+)")
	commit("ddl_recovery.log", "DDL recovery log: replays or rolls back a DDL cut short")
	commit("tc.log", "transaction coordinator log (two engines, no binary log)")
	commit("aria_log_control", "Aria control file")
	commit("aria_log.*", "Aria transaction log")
	bin := "*-bin"
	if b := s.opts.get("log_bin", ""); b != "" && b != "1" && b != "0" {
		bin = path.Base(strings.TrimSuffix(b, path.Ext(b)))
	}
	commit(bin+".[0-9]*", "binary log: the commit record when the binary log is on")
	commit(bin+".index", "binary log index")
	commit(bin+".state", "binary log GTID state")
	for _, rel := range []string{"pid_file", "socket", "log_error", "general_log_file", "slow_query_log_file", "tmpdir"} {
		if p, ok := s.pathSetting(rel); ok && p != "" {
			suffix := ""
			if rel == "tmpdir" {
				suffix = "/"
			}
			local(p+suffix, rel+": this server's, not the data's")
		}
	}
	local(s.prefix+"*.pid", "pid file: names a process on this machine")
	local(s.prefix+"*.sock", "socket: made by the server at start")
	local(s.prefix+"*.sock.lock", "socket lock (MySQL 8)")
	local(s.prefix+"*.err", "error log: this machine's history")
	local(s.prefix+"*-slow.log", "slow query log")
	local(s.prefix+"*.log", "general query log (hostname.log)")
	temp := strings.SplitN(s.opts.get("innodb_temp_data_file_path", "ibtmp1:12M:autoextend"), ":", 2)[0]
	local(s.prefix+temp, "InnoDB temporary tablespace: recreated at every start")
	local(s.prefix+"#innodb_temp/", "InnoDB session temporary tablespaces (MySQL 8): recreated at start")
	pool := s.opts.get("innodb_buffer_pool_filename", "ib_buffer_pool")
	local(s.prefix+pool, "buffer pool dump: a warm-up hint for this machine's memory")
	local(s.prefix+pool+".incomplete", "buffer pool dump being written")
	if s.prefix == "" {
		out = append(out, sdk.Rule{Pattern: "**/*", Hint: sdk.PathHint{Fsync: s.data, Reason: "data directory"}})
	} else {
		out = append(out, sdk.Rule{Pattern: s.prefix, Hint: sdk.PathHint{Fsync: s.data, Reason: "data directory"}})
	}
	return out
}

// Validate checks the configuration (sdk.Validator): keys, policies, the
// option file, where the data directory is.
func (h *Hint) Validate(c sdk.Config) error {
	_, err := load(sdk.HintEnv{Config: c, Volume: c.String("datadir", "/")})
	return err
}

// Classify answers from the rules of the last Rules call.
func (h *Hint) Classify(_ context.Context, paths []string) ([]sdk.PathHint, error) {
	return sdk.MatchAll(h.rules, paths), nil
}
