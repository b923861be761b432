package fstest

import (
	"os/exec"
	"testing"
)

// A frozen process has no running thread, and thaws.
func TestFreezeStopsEveryThread(t *testing.T) {
	// A shell loop that keeps a thread runnable.
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	Freeze(t, cmd.Process)
	if n, err := runningThreads(cmd.Process.Pid); err != nil || n != 0 {
		t.Fatalf("after Freeze: %d running threads, %v", n, err)
	}
	Thaw(cmd.Process)
	for i := 0; ; i++ {
		n, err := runningThreads(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if i > 1000 {
			t.Fatal("still stopped after Thaw")
		}
	}
}

func TestThreadState(t *testing.T) {
	for stat, want := range map[string]byte{
		"12 (pbfs) S 1 12":     'S',
		"12 (a) b) (c) T 1 12": 'T',
		"12 (x) R 1":           'R',
	} {
		if got, ok := threadState(stat); !ok || got != want {
			t.Errorf("%q: %c %v, want %c", stat, got, ok, want)
		}
	}
	if _, ok := threadState("12 (trunc"); ok {
		t.Error("a stat line without ')' read")
	}
}
