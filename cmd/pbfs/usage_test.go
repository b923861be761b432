package main

import (
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// Every usage mistake is refused with exit code 2 and a message naming
// the value, before anything is touched; a failure is 1.
func TestUsageErrorsExitTwo(t *testing.T) {
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	os.Mkdir(vol, 0o755)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-level", "loud", "barrier", "--journal", jdir}, `--log-level "loud"`},
		{[]string{"--log-format", "xml", "barrier", "--journal", jdir}, `--log-format "xml"`},
		{[]string{"--config"}, "--config needs a FILE"},
		{[]string{"--config=", "mount", "--journal", jdir, vol}, "--config needs a FILE"},
		{[]string{"mount", "--bogus", vol}, "bogus"},
		{[]string{"mount", vol}, `"journal"`},
		{[]string{"mount", "--journal", jdir, "--ack", "1", vol}, `"1"`},
		{[]string{"mount", "--journal", jdir, "--min-backups", "1", vol}, "min-backups 1 needs backups"},
		{[]string{"mount", "--journal", jdir, "--token", "t", "--backup", "127.0.0.1:1", "--min-backups", "2", vol}, "only 1 backups given"},
		{[]string{"mount", "--journal", jdir, "--token", "t", "--backup", "127.0.0.1:1", "--min-backups", "-1", vol}, "min-backups -1"},
		{[]string{"mount", "--journal", jdir, "--token", "t", "--backup", "127.0.0.1:1", "--ack", "none", "--min-backups", "1", vol}, "contradicts"},
		{[]string{"mount", "--journal", jdir, "--fsync", "sometimes", vol}, `"sometimes"`},
		{[]string{"mount", "--journal", jdir, "--fsync-rule", "*.log", vol}, `*.log`},
		{[]string{"mount", "--journal", jdir, "--local-only", "/abs", vol}, `/abs`},
		{[]string{"mount", "--journal", jdir, "--token", "t", "--backup", "nohost", vol}, "nohost"},
		{[]string{"mount", "--journal", filepath.Join(vol, "j"), vol}, "outside the volume"},
		{[]string{"backup", "--listen", "127.0.0.1:1", "--journal", jdir}, "VOLUME"},
		{[]string{"backup", "--listen", "127.0.0.1:1", "--token", "t", "--journal", jdir, "--procs", "100000", vol}, "--procs 100000"},
		{[]string{"backup", "--listen", "127.0.0.1:1", "--token", "t", "--journal", jdir, "--procs", "-1", vol}, "--procs -1"},
		{[]string{"backup", "--listen", "127.0.0.1:1", "--token", "t", "--journal", jdir, "--timer-slack", "9999h", vol}, "--timer-slack 9999h"},
		{[]string{"backup", "--listen", "127.0.0.1:1", "--token", "t", "--journal", jdir, "--timer-slack", "-1s", vol}, "--timer-slack -1s"},
		{[]string{"mount", "--journal", jdir, "--epoch", "18446744073709551615", vol}, "--epoch 18446744073709551615"},
		{[]string{"mount", "--journal", jdir, "--journal-reserve", "9223372036854775807", vol}, "--journal-reserve"},
		{[]string{"promote", "--journal", jdir, vol}, "holds no journal"},
		{[]string{"backup", "--listen", "", "--token", "t", "--journal", jdir, vol}, "--listen is empty"},
		{[]string{"bogus"}, `no command "bogus"`},
		{nil, "COMMANDS:"}, // no command: the list, and a usage error, not success
		{[]string{"journal"}, "replay"},
		{[]string{"plugin"}, "check"},
		{[]string{"status", "--coordinator", "etcd://[::1"}, `endpoint "[::1"`},
		{[]string{"status", "--coordinator", "etcd://host:99999"}, `endpoint "host:99999"`},
		{[]string{"status", "--coordinator", "etcd://,,"}, "names no endpoint"},
		{[]string{"node", "--coordinator", "etcd://127.0.0.1:2379", "--name", "a", "--listen", "127.0.0.1:7700", "--advertise", "bogus", "--token", "t", "--journal", jdir, vol}, `--advertise: "bogus"`},
		{[]string{"node", "--coordinator", "etcd://127.0.0.1:2379", "--name", "a", "--listen", "127.0.0.1:7700", "--token", "t", "--journal", jdir, "--ack", "1", vol}, "a node takes all, majority or none"},
		{[]string{"node", "--coordinator", "etcd://127.0.0.1:2379", "--name", "a", "--listen", "127.0.0.1:7700", "--token", "t", "--journal", jdir, "--backup", "127.0.0.1:7701", vol}, "--backup is not for a node"},
		{[]string{"node", "--coordinator", "etcd://127.0.0.1:2379", "--name", "a", "--listen", "127.0.0.1:7700", "--token", "t", "--journal", jdir, "--ack", "none", "--min-backups", "1", vol}, "contradicts"},
		{[]string{"barrier", "--journal", jdir, "--timeout", "0"}, "--timeout 0s: want a positive duration"},
		{[]string{"resync", "--journal", jdir, "--wait", "--timeout", "-1s"}, "--timeout -1s: want a positive duration"},
		{[]string{"mount", vol, "--journal", jdir}, "after an argument"},
		{[]string{"journal", "replay", "--journal", jdir, vol, "--from", "2"}, `"--from" comes after the arguments`},
		{[]string{"status", "--journal", jdir, "extra"}, "takes no arguments"},
		{[]string{"journal", "show", "--journal", jdir, "1", "2"}, "takes one argument, SEQ"},
		{[]string{"journal", "bogus"}, `no command "bogus"`},
		{[]string{"journal", "ls", "--bogus"}, "bogus"},
		{[]string{"plugin", "check"}, "PATH"},
		{[]string{"plugin", "check", "--config", "garbage", "/nonexistent"}, `--config "garbage": want key=value`},
	} {
		out, code := run(t, c.args...)
		if code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("pbfs %s: exit %d, want 2 and %q in:\n%s", strings.Join(c.args, " "), code, c.want, out)
		}
	}
	// Refused after the usage checks, by what the machine says: still no journal.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"backup", "--listen", busy.Addr().String(), "--token", "t", "--journal", jdir, vol}, 1, "address already in use"},
		{[]string{"backup", "--listen", "127.0.0.1:0", "--token", "t", "--journal", jdir, file}, 2, "not a directory"},
		{[]string{"backup", "--listen", "127.0.0.1:0", "--token", "t", "--journal", jdir, "--tls-cert", file, vol}, 2, "the key and CA are missing"},
		{[]string{"verify", "--journal", jdir, "--tls-ca", file}, 2, "the certificate and key are missing"},
	} {
		out, code := run(t, c.args...)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("pbfs %s: exit %d, want %d and %q in:\n%s", strings.Join(c.args, " "), code, c.code, c.want, out)
		}
	}
	if _, err := os.Stat(jdir); err == nil {
		t.Error("a refused command created the journal")
	}
	if out, code := run(t, "barrier", "--journal", jdir); code != 1 {
		t.Errorf("barrier with no mount: exit %d, want 1:\n%s", code, out)
	}
	if out, code := run(t, "help", "journal"); code != 0 || !strings.Contains(out, "replay") {
		t.Errorf("help journal: exit %d:\n%s", code, out)
	}
	if out, code := run(t, "--version"); code != 0 || !strings.HasPrefix(out, "pbfs version ") {
		t.Errorf("--version: exit %d:\n%s", code, out)
	}
}

// The help texts give each default once and name placeholders sensibly,
// and every flag the README mentions exists.
func TestHelpTexts(t *testing.T) {
	var all strings.Builder
	for _, cmd := range [][]string{{}, {"mount"}, {"backup"}, {"promote"}, {"node"}, {"status"}, {"resync"}, {"barrier"},
		{"journal", "ls"}, {"journal", "replay"}, {"plugin", "check"}} {
		out, code := run(t, append(cmd, "--help")...)
		if code != 0 {
			t.Fatalf("%v --help: exit %d", cmd, code)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("pbfs %v --help: two defaults: %s", cmd, strings.TrimSpace(line))
			}
			if strings.Contains(line, "--backup pbfs") {
				t.Errorf("pbfs %v --help: placeholder from a quoted word: %s", cmd, strings.TrimSpace(line))
			}
		}
		all.WriteString(out)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range regexp.MustCompile("`(--[a-z][a-z-]+)").FindAllStringSubmatch(string(readme), -1) {
		if !strings.Contains(all.String(), f[1]+" ") && !strings.Contains(all.String(), f[1]+",") {
			t.Errorf("README mentions %s, which no command's help has", f[1])
		}
	}
}

// A journal on a file system no larger than its reserve could never take
// an append: mount and backup refuse it up front (it used to start and
// then refuse every write); a bad listen address is refused too.
func TestJournalTooSmallRefused(t *testing.T) {
	disk := fstest.SmallFS(t, 40<<20)
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	os.Mkdir(vol, 0o755)
	jdir := filepath.Join(disk, "j")
	for _, args := range [][]string{
		{"mount", "--journal", jdir, vol},
		{"backup", "--listen", "127.0.0.1:0", "--token", "t", "--journal", jdir, vol},
	} {
		out, code := run(t, args...)
		if code != 2 || !strings.Contains(out, "too small for its reserve") {
			t.Errorf("pbfs %s: exit %d:\n%s", args[0], code, out)
		}
	}
	if _, err := os.Stat(jdir); err == nil {
		t.Error("the journal was created anyway")
	}
	if out, code := run(t, "backup", "--listen", "nohost", "--token", "t", "--journal", filepath.Join(dir, "j"), vol); code != 2 || !strings.Contains(out, "nohost") {
		t.Errorf("backup --listen nohost: exit %d:\n%s", code, out)
	}
}

// A release build (no -tags failpoints) ignores the failpoints the tests
// use: PBFS_FAILPOINT_APPEND would fail every barrier of a test build.
func TestReleaseBuildHasNoFailpoints(t *testing.T) {
	fstest.RequireFUSE(t)
	bin := filepath.Join(t.TempDir(), "pbfs")
	if out, err := osexec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	os.Mkdir(vol, 0o755)
	cmd := osexec.Command(bin, "mount", "--journal", jdir, vol)
	cmd.Env = append(os.Environ(), "PBFS_FAILPOINT_APPEND=1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	for i := 0; !fstest.Mounted(vol) && i < 200; i++ {
		time.Sleep(25 * time.Millisecond)
	}
	os.WriteFile(filepath.Join(vol, "f"), []byte("x"), 0o644)
	if out, code := run(t, "barrier", "--journal", jdir, "--timeout", "10s"); code != 0 {
		t.Fatalf("barrier under PBFS_FAILPOINT_APPEND in a release build: exit %d:\n%s", code, out)
	}
}

// A plugin configuration the plugin refuses (a misspelt key) stops the
// mount before it mounts, with exit code 2 naming the key.
func TestPluginConfigRefusedBeforeMount(t *testing.T) {
	fstest.RequireFUSE(t)
	proxy := fstest.Build(t, "github.com/pbfs/pbfs/plugins/http-proxy")
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	os.Mkdir(vol, 0o755)
	out, code := run(t, "mount", "--journal", filepath.Join(dir, "j"), "--plugin", "http-proxy="+proxy,
		"--plugin-config", "http-proxy:listen=127.0.0.1:0,upstream=http://127.0.0.1:1,upstrem-timeout=5s", vol)
	if code != 2 || !strings.Contains(out, "upstrem-timeout") || !strings.Contains(out, "plugin http-proxy") {
		t.Fatalf("misspelt plugin key: exit %d:\n%s", code, out)
	}
	if fstest.Mounted(vol) {
		t.Fatal("mounted anyway")
	}
}
