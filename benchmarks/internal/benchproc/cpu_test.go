package benchproc

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestGroupCPU burns CPU only in a grandchild of the process started
// (until the test kills the group) and finds it in the group's time.
func TestGroupCPU(t *testing.T) {
	p, err := Start("burn", filepath.Join(t.TempDir(), "log"), nil,
		"sh", "-c", `sh -c 'while :; do :; done' & sleep 10`)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL) // the whole group

	var c CPU
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c = p.CPU(); c.Total() >= 200*time.Millisecond {
			return
		}
	}
	t.Fatalf("group CPU %v: want at least 200ms from the busy grandchild", c)
}

// TestGroupCPUByName finds a grandchild's CPU under its own name, apart
// from the processes that started it.
func TestGroupCPUByName(t *testing.T) {
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(sh)
	if err != nil {
		t.Fatal(err)
	}
	burner := filepath.Join(t.TempDir(), "burner")
	if err := os.WriteFile(burner, data, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := Start("burn", filepath.Join(t.TempDir(), "log"), nil,
		"sh", "-c", burner+` -c 'while :; do :; done' & sleep 10`)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)

	var by map[string]CPU
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if by = GroupCPUByName(p.Cmd.Process.Pid); by["burner"].Total() >= 200*time.Millisecond {
			if by["sh"].Total() >= 100*time.Millisecond {
				t.Fatalf("the starting shell was charged %v: the burner's time went to the wrong name", by["sh"])
			}
			return
		}
	}
	t.Fatalf("CPU by name %v: want at least 200ms under \"burner\"", by)
}
