package openfiles

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A process with a file open under the directory, and one with its
// working directory there, are found; one outside is not.
func TestUnder(t *testing.T) {
	dir := t.TempDir()
	inner := filepath.Join(dir, "in")
	os.Mkdir(inner, 0o755)
	os.WriteFile(filepath.Join(inner, "f"), []byte("x"), 0o644)
	start := func(cmd *exec.Cmd) int {
		t.Helper()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd.Process.Pid
	}
	held := start(exec.Command("sh", "-c", "exec 3<"+filepath.Join(inner, "f")+"; exec sleep 60"))
	cwd := exec.Command("sleep", "60")
	cwd.Dir = inner
	inCwd := start(cwd)
	outside := exec.Command("sleep", "60")
	outside.Dir = "/"
	start(outside)
	want := map[int]bool{held: false, inCwd: false}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		hs, err := Under(inner, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if _, ok := want[h.Pid]; !ok {
				t.Fatalf("found %v, which holds nothing under %s", h, inner)
			}
			want[h.Pid] = true
		}
		if want[held] && want[inCwd] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not found: %v (found: %v)", want, hs)
		}
	}
}
