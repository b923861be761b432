package control

import (
	"testing"
	"time"
)

func TestRateLogHoldsBackRepeats(t *testing.T) {
	r := &rateLog{every: time.Second}
	t0 := time.Now()
	if ok, n := r.allow(t0); !ok || n != 0 {
		t.Fatalf("first: %v %d", ok, n)
	}
	for i := 1; i <= 5; i++ {
		if ok, _ := r.allow(t0.Add(time.Duration(i) * 100 * time.Millisecond)); ok {
			t.Fatalf("repeat %d within the interval logged", i)
		}
	}
	if ok, n := r.allow(t0.Add(time.Second)); !ok || n != 5 {
		t.Fatalf("after the interval: %v, %d held back, want 5", ok, n)
	}
}
