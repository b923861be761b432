package benchproc

import (
	"strings"
	"testing"
	"time"
)

// TestCalibrate: every part measures something plausible, and a failing
// round trip ends with an error instead of hanging.
func TestCalibrate(t *testing.T) {
	c := Calibrate(t.TempDir())
	if c.Err != nil {
		t.Fatal(c.Err)
	}
	// Each part must have measured something, and a round trip of two
	// wake-ups costs more than one system call on any machine.
	if c.Syscall <= 0 || c.Fdatasync <= 0 || c.WakeSame <= c.Syscall {
		t.Fatalf("implausible calibration: %+v", c)
	}
	if len(usableCPUs(2)) > 1 && c.WakeCross <= 0 {
		t.Fatalf("this process may use two CPUs, but no round trip across them was measured: %+v", c)
	}
	if c.Fdatasync > 10*time.Second {
		t.Fatalf("a 4 KiB synced write took %s", c.Fdatasync)
	}
	for _, want := range []string{"system call", "round trip", "fdatasync p50"} {
		if !strings.Contains(c.String(), want) {
			t.Errorf("%q lacks %q", c.String(), want)
		}
	}
}

// TestWakeRoundTripFails: a CPU the process may not use fails the round
// trip with an error, and the thread on the other side stops too.
func TestWakeRoundTripFails(t *testing.T) {
	done := make(chan error, 1)
	go func() {
		_, err := wakeRoundTrip(usableCPUs(1)[0], 1023)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a round trip on CPU 1023 succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a failed round trip hangs")
	}
}
