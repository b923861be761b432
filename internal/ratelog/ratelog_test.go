package ratelog

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := New(10 * time.Second)
	t0 := time.Unix(1000, 0)
	if ok, held := l.Allow("open EMFILE", t0); !ok || held != 0 {
		t.Fatalf("first line: %v %d", ok, held)
	}
	for i := 1; i <= 5; i++ {
		if ok, _ := l.Allow("open EMFILE", t0.Add(time.Duration(i)*time.Second)); ok {
			t.Fatalf("line %d within the interval let through", i)
		}
	}
	if ok, _ := l.Allow("write ENOSPC", t0.Add(time.Second)); !ok {
		t.Fatal("another kind held back")
	}
	ok, held := l.Allow("open EMFILE", t0.Add(11*time.Second))
	if !ok || held != 5 {
		t.Fatalf("after the interval: %v, held %d, want 5", ok, held)
	}
	if ok, held := l.Allow("open EMFILE", t0.Add(30*time.Second)); !ok || held != 0 {
		t.Fatalf("a quiet kind: %v, held %d", ok, held)
	}
}
