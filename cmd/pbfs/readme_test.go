package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pbfs/pbfs/internal/fstest"
)

// The README's first command, exactly as written, from a clean clone of
// this repository: it must set up and run a primary and a backup and end
// with the backup equal to the primary. (Its second command is the suite
// this test is part of.)
func TestReadmeQuickstart(t *testing.T) {
	fstest.RequireFUSE(t)
	if testing.Short() {
		t.Skip("builds the whole tree in a clean clone")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```sh\n")
	if !ok {
		t.Fatal("README has no sh block")
	}
	first, _, _ := strings.Cut(block, "\n")
	command, _, _ := strings.Cut(first, "#")
	command = strings.TrimSpace(command)
	if !strings.Contains(command, "make demo") {
		t.Fatalf("the README's first command is %q; this test expects the demo", command)
	}
	clone := filepath.Join(t.TempDir(), "pbfs")
	if out, err := exec.Command("git", "clone", "-q", "../..", clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	cmd := exec.Command("bash", "-c", command)
	cmd.Dir = clone
	// The demo keeps its scratch directory for the user to look at; here
	// it goes where the test cleans up.
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "PBFS_DEMO_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "the backup's volume equals the primary's") {
		t.Fatalf("%s: %v\n%s", command, err, out)
	}
}

// The README's plugin check line parses as written (flags before the
// plugin's path: urfave stops at the first argument), with the plugin
// built here and an option file of the test's standing in for the
// machine's.
func TestReadmePluginCheck(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, "pbfs plugin check --volume") {
			line, _, _ = strings.Cut(l, "#")
		}
	}
	if line == "" {
		t.Fatal("the README has no pbfs plugin check line for mysql-hint")
	}
	cnf := filepath.Join(t.TempDir(), "my.cnf")
	must(t, os.WriteFile(cnf, []byte("[mysqld]\ninnodb_flush_log_at_trx_commit=1\n"), 0o644))
	line = strings.ReplaceAll(line, "/etc/mysql/my.cnf", cnf)
	line = strings.ReplaceAll(line, "bin/mysql-hint", fstest.Build(t, "github.com/pbfs/pbfs/plugins/mysql-hint"))
	args := strings.Fields(line)[1:]
	out, code := run(t, args...)
	if code != 0 || !strings.Contains(out, "innodb_flush_log_at_trx_commit") {
		t.Fatalf("%s: exit %d:\n%s", line, code, out)
	}
	// A relative --volume is taken from the working directory, as a
	// mount's is: the plugin was handed it as given, and refused it.
	for i, a := range args {
		if a == "--volume" && i+1 < len(args) {
			args[i+1] = "relative/volume"
		}
	}
	if out, code := run(t, args...); code != 0 || !strings.Contains(out, "innodb_flush_log_at_trx_commit") {
		t.Fatalf("with a relative --volume: exit %d:\n%s", code, out)
	}
}

// The README's layout table names every package of the tree, and every
// path it names exists: a package added, moved or removed shows up here.
func TestReadmeLayoutNamesEveryPackage(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "## Layout\n")
	if !ok {
		t.Fatal("README has no Layout section")
	}
	named := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, p := range strings.Split(cell, ",") {
			p = strings.Trim(strings.TrimSpace(p), "`")
			named[strings.TrimSuffix(p, "/")] = true
			if _, err := os.Stat(filepath.Join("../..", p)); err != nil {
				t.Errorf("the layout table names %s: %v", p, err)
			}
		}
	}
	// Top-level packages, and the packages under internal/ and plugins/;
	// benchmarks/ and third_party/ are named whole.
	for _, pattern := range []string{"*/*.go", "cmd/*/*.go", "internal/*/*.go", "plugins/*/*.go"} {
		files, _ := filepath.Glob(filepath.Join("../..", pattern))
		for _, f := range files {
			dir, _ := filepath.Rel("../..", filepath.Dir(f))
			if strings.HasPrefix(dir, "benchmarks") || strings.HasPrefix(dir, "third_party") {
				continue
			}
			if !named[dir] {
				t.Errorf("the README's layout table does not name %s/", dir)
				named[dir] = true // once
			}
		}
	}
}
