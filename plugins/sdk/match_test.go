package sdk

import (
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	rules := []Rule{
		{Pattern: "db/ddl_recovery.log", Hint: PathHint{Fsync: FsyncReplicated}},
		{Pattern: "db/*.log", Hint: PathHint{LocalOnly: true}},
		{Pattern: "tmp/", Hint: PathHint{LocalOnly: true}},
		{Pattern: "**/*-shm", Hint: PathHint{LocalOnly: true}},
		{Pattern: "db/", Hint: PathHint{Fsync: FsyncBoth}},
	}
	for p, want := range map[string]PathHint{
		"db/ddl_recovery.log": {Fsync: FsyncReplicated}, // the first rule that matches decides
		"db/host.log":         {LocalOnly: true},
		"db/app/x.log":        {Fsync: FsyncBoth}, // * does not cross a /
		"tmp/a/b":             {LocalOnly: true},
		"tmp":                 {},
		"a.db-shm":            {LocalOnly: true},
		"x/y/z/a.db-shm":      {LocalOnly: true},
		"/db/../tmp/x":        {LocalOnly: true}, // cleaned first
		"other":               {},
	} {
		got, _ := Match(rules, p)
		if got != want {
			t.Errorf("%s: %+v, want %+v", p, got, want)
		}
	}
	for _, bad := range []string{"", "/abs", "a/../b", "a//b", "[", "a/**/b", "**/"} {
		if CheckPattern(bad) == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
	for _, good := range []string{"*.pid", "tmp/", "**/*-shm", "db/ib_logfile*", "#innodb_temp/"} {
		if err := CheckPattern(good); err != nil {
			t.Errorf("pattern %q: %v", good, err)
		}
	}
}

// Match never panics and agrees with itself on cleaned paths.
func FuzzMatch(f *testing.F) {
	f.Add("**/*-shm", "a/b/c-shm")
	f.Add("tmp/", "tmp/x")
	f.Fuzz(func(t *testing.T, pattern, p string) {
		rules := []Rule{{Pattern: pattern, Hint: PathHint{LocalOnly: true}}}
		a, _ := Match(rules, p)
		b, _ := Match(rules, "/"+p)
		if a != b {
			t.Fatalf("%q vs %q under %q", p, "/"+p, pattern)
		}
	})
}

// A misspelt plugin setting is refused, naming it.
func TestConfigOnly(t *testing.T) {
	c := Config{"listen": ":1", "upstrem": "x"}
	if err := c.Only("listen", "upstream"); err == nil || !strings.Contains(err.Error(), "upstrem") {
		t.Fatalf("a misspelt key passed: %v", err)
	}
	if err := (Config{"listen": ":1"}).Only("listen", "upstream"); err != nil {
		t.Fatal(err)
	}
}
