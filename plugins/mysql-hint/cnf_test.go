package main

import (
	"os"
	"path/filepath"
	"testing"
)

// Option files are read as the server reads them: its groups only, later
// values winning, includes, '-' and '_' alike, skip-/loose-/enable-
// prefixes, quotes and trailing comments.
func TestReadOptions(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("conf.d/50-server.cnf", "[mysqld]\ninnodb-flush-log-at-trx-commit = 2\nskip-innodb-doublewrite\n[client]\nsocket=/nope\n")
	write("conf.d/60-late.cnf", "[mariadb]\ninnodb_flush_log_at_trx_commit=1 # the last one wins\n")
	write("conf.d/ignored.txt", "[mysqld]\nsync_binlog=7\n")
	write("extra.cnf", "[server]\nloose-sync-binlog=1\nenable-log-bin\n[mariadb-10.11]\ntmpdir=\"/vol/tmp\"\n[mariadb-11.4]\ntmpdir=/other\n")
	main := write("my.cnf", "# top\n[client-server]\nsocket = /run/mysqld/mysqld.sock\n!include "+filepath.Join(dir, "extra.cnf")+"\n!includedir "+filepath.Join(dir, "conf.d")+"\n")
	o, err := readOptions(main, "10.11.19")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"socket": "/run/mysqld/mysqld.sock", "innodb_flush_log_at_trx_commit": "1", "innodb_doublewrite": "0",
		"sync_binlog": "1", "log_bin": "1", "tmpdir": "/vol/tmp",
	} {
		if got := o[k]; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if _, err := readOptions(filepath.Join(dir, "missing.cnf"), ""); err == nil {
		t.Error("a missing option file was read")
	}
}

// Any option file, however broken (including one that includes itself),
// reads without a panic or a hang, and rules and checks follow from it.
func FuzzReadOptions(f *testing.F) {
	f.Add([]byte("[mysqld]\ninnodb_flush_log_at_trx_commit=2\nskip-innodb-doublewrite\n"))
	f.Add([]byte("[mariadb-10.11]\ntmpdir='/vol/t'\n!includedir /nonexistent\n"))
	f.Add([]byte("[server]\nlog-bin=/vol/db/bin.log # x\nsocket=\"a b\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "my.cnf")
		if err := os.WriteFile(p, append(data, []byte("\n!include "+p+"\n")...), 0o644); err != nil {
			t.Fatal(err)
		}
		o, err := readOptions(p, "10.11")
		if err == nil {
			t.Fatal("a file including itself forever was read")
		}
		_ = o
		s := &server{volume: "/vol", datadir: "/vol", opts: Options{}}
		// Also the rules and checks of what one level of it says.
		os.WriteFile(p, data, 0o644)
		if o, err := readOptions(p, ""); err == nil {
			s.opts = o
			for _, r := range s.rules() {
				if r.Pattern == "" {
					t.Fatalf("empty pattern from %q", data)
				}
			}
			s.check()
		}
	})
}
