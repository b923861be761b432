package benchproc

import (
	"strings"
	"testing"
	"time"
)

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
	if c.Fdatasync > 10*time.Second {
		t.Fatalf("a 4 KiB synced write took %s", c.Fdatasync)
	}
	for _, want := range []string{"system call", "round trip", "fdatasync p50"} {
		if !strings.Contains(c.String(), want) {
			t.Errorf("%q lacks %q", c.String(), want)
		}
	}
}
