package capture

import (
	"testing"
	"time"
)

func TestLogLimiter(t *testing.T) {
	var l logLimiter
	t0 := time.Unix(1000, 0)
	if ok, held := l.allow("open EMFILE", t0); !ok || held != 0 {
		t.Fatalf("first line: %v %d", ok, held)
	}
	for i := 1; i <= 5; i++ {
		if ok, _ := l.allow("open EMFILE", t0.Add(time.Duration(i)*time.Second)); ok {
			t.Fatalf("line %d within %v let through", i, logEvery)
		}
	}
	if ok, _ := l.allow("write ENOSPC", t0.Add(time.Second)); !ok {
		t.Fatal("another kind held back")
	}
	ok, held := l.allow("open EMFILE", t0.Add(logEvery+time.Second))
	if !ok || held != 5 {
		t.Fatalf("after %v: %v, held %d, want 5", logEvery, ok, held)
	}
	if ok, held := l.allow("open EMFILE", t0.Add(3*logEvery)); !ok || held != 0 {
		t.Fatalf("a quiet kind: %v, held %d", ok, held)
	}
}
