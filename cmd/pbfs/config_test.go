package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// etc/pbfs.yaml parses, and names every flag of every command it
// configures: a new flag without a line there fails this test.
func TestSampleConfigIsComplete(t *testing.T) {
	app := newApp()
	cfg, err := loadConfig("../../etc/pbfs.yaml", app.Commands)
	if err != nil {
		t.Fatal(err)
	}
	mount := findCommand(app.Commands, "mount")
	for _, section := range configSections {
		cmd := findCommand(app.Commands, section)
		for _, f := range cmd.Flags {
			name := f.Names()[0]
			if name == "help" {
				continue
			}
			_, inSection := cfg[section][name]
			_, inMount := cfg["mount"][name]
			if !inSection && !(section != "backup" && findFlag(mount, name) != nil && inMount) {
				t.Errorf("etc/pbfs.yaml: section %s lacks %s", section, name)
			}
		}
	}
}

// pbfs --config mounts from the file; a flag overrides it; environment
// variables are expanded; an unknown key is refused with exit 2 naming it.
func TestConfigFile(t *testing.T) {
	fstest.RequireFUSE(t)
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	os.Mkdir(vol, 0o755)
	t.Setenv("TEST_JOURNAL", jdir)
	conf := filepath.Join(dir, "pbfs.yaml")
	must(t, os.WriteFile(conf, []byte("mount:\n  volume: "+vol+"\n  journal: ${TEST_JOURNAL}\n  seal-interval: 1h\n  local-only: ['*.pid']\n"), 0o644))
	cmd := exec.Command(pbfsBin, "--config", conf, "mount", "--seal-interval", "10ms")
	out := &fstest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	must(t, cmd.Start())
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	for i := 0; !fstest.Mounted(vol) && i < 200; i++ {
		time.Sleep(25 * time.Millisecond)
	}
	if !fstest.Mounted(vol) {
		t.Fatalf("not mounted from the config file:\n%s", out)
	}
	must(t, os.WriteFile(filepath.Join(vol, "a"), []byte("x"), 0o644))
	// The flag's 10 ms seal interval, not the file's hour: a batch is
	// sealed without a barrier.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if out, _ := run(t, "journal", "ls", "--journal", jdir); strings.Count(out, "\n") >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command line's --seal-interval did not override the file's")
		}
		time.Sleep(50 * time.Millisecond)
	}

	must(t, os.WriteFile(conf, []byte("mount:\n  volume: "+vol+"\n  jornal: "+jdir+"\n"), 0o644))
	if out, code := run(t, "--config", conf, "mount"); code != 2 || !strings.Contains(out, `unknown key "jornal"`) {
		t.Errorf("unknown key: exit %d:\n%s", code, out)
	}
	must(t, os.WriteFile(conf, []byte("mount:\n  seal-interval: [1s, 2s]\n"), 0o644))
	if out, code := run(t, "--config", conf, "mount"); code != 2 || !strings.Contains(out, "seal-interval") {
		t.Errorf("a list for a single flag: exit %d:\n%s", code, out)
	}
	must(t, os.WriteFile(conf, []byte("moutn:\n  journal: x\n"), 0o644))
	if out, code := run(t, "--config", conf, "mount"); code != 2 || !strings.Contains(out, `unknown section "moutn"`) {
		t.Errorf("unknown section: exit %d:\n%s", code, out)
	}
}

// A node reads the mount section too, but not its backups (a node's are
// the members etcd lists, and it refuses --backup): with the sample file,
// pbfs node used to stop at "--backup is not for a node". Its --ack is
// the node section's, majority.
func TestNodeSkipsTheMountSectionsBackups(t *testing.T) {
	app := newApp()
	argv, err := applyConfig([]string{"pbfs", "--config", "../../etc/pbfs.yaml", "node", "--name", "n2"}, app.Commands)
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(argv, " ")
	for _, want := range []string{"--ack=majority", "--min-backups=1", "--journal=", "--name n2", "--name=n1"} {
		if want == "--name=n1" {
			if strings.Contains(args, want) {
				t.Errorf("the command line's --name did not win: %s", args)
			}
			continue
		}
		if !strings.Contains(args, want) {
			t.Errorf("node's arguments lack %s: %s", want, args)
		}
	}
	if strings.Contains(args, "--backup=") {
		t.Fatalf("node was given the mount section's backups: %s", args)
	}
	// pbfs promote keeps them: they are whom it replicates to.
	argv, err = applyConfig([]string{"pbfs", "--config", "../../etc/pbfs.yaml", "promote"}, app.Commands)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(argv, " "), "--backup=b1.example:7700") {
		t.Fatalf("promote lost the mount section's backups: %v", argv)
	}
}
