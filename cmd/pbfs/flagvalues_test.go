package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFlagValues: sizes take the units pbfs prints (64M, 8MiB), written
// out in bytes before the flags parse them; a bad size, duration or number
// is refused with what a good one looks like, from the command line and
// from a configuration file, where the error names the file and line.
func TestFlagValues(t *testing.T) {
	cmds := newApp().Commands
	got, err := normalizeFlags([]string{"pbfs", "--log-level", "debug", "mount", "--batch-bytes", "64M", "--journal-reserve=8MiB", "--seal-interval", "50ms", "VOL"}, cmds)
	want := []string{"pbfs", "--log-level", "debug", "mount", "--batch-bytes", "67108864", "--journal-reserve=8388608", "--seal-interval", "50ms", "VOL"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("normalizeFlags = %q, %v; want %q", got, err, want)
	}
	for _, c := range []struct{ args, want string }{
		{"mount --batch-bytes lots VOL", `--batch-bytes: "lots" is not a size`},
		{"backup --journal-reserve=8X VOL", `--journal-reserve: "8X" is not a size`},
		{"mount --seal-interval 50 VOL", `--seal-interval: "50" is not a duration: write it with a unit`},
		{"mount --min-backups two VOL", `--min-backups: "two" is not a whole number`},
	} {
		_, err := normalizeFlags(append([]string{"pbfs"}, strings.Fields(c.args)...), cmds)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("pbfs %s: %v, want %q", c.args, err, c.want)
		}
	}
	path := filepath.Join(t.TempDir(), "pbfs.yaml")
	must(t, os.WriteFile(path, []byte("mount:\n  journal: /j\n  batch-bytes: lots\n"), 0o644))
	if _, err := loadConfig(path, cmds); err == nil || !strings.Contains(err.Error(), path+": mount.batch-bytes (line 3): \"lots\" is not a size") {
		t.Errorf("config with batch-bytes: lots: %v", err)
	}
	must(t, os.WriteFile(path, []byte("mount:\n  batch-bytes: 16MiB\n  seal-interval: 20ms\n"), 0o644))
	cfg, err := loadConfig(path, cmds)
	if err != nil || cfg["mount"]["batch-bytes"][0] != "16777216" {
		t.Errorf("config with batch-bytes: 16MiB: %v, %v", cfg, err)
	}
}

// TestConfigExpansion: a hook runs exactly what the file says ($! and $VAR
// are the shell's), and elsewhere $$ is a literal $ beside expanded
// variables.
func TestConfigExpansion(t *testing.T) {
	t.Setenv("PBFS_TEST_SECRET", "x1")
	path := filepath.Join(t.TempDir(), "pbfs.yaml")
	must(t, os.WriteFile(path, []byte("node:\n  on-promote: \"svc & echo $! > svc.pid; echo $HOME\"\n  token: \"a$$b${PBFS_TEST_SECRET}\"\n"), 0o644))
	cfg, err := loadConfig(path, newApp().Commands)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg["node"]["on-promote"][0]; got != "svc & echo $! > svc.pid; echo $HOME" {
		t.Errorf("on-promote = %q, want it as written", got)
	}
	if got := cfg["node"]["token"][0]; got != "a$bx1" {
		t.Errorf("token = %q, want %q", got, "a$bx1")
	}
}
