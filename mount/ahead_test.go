package mount

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pbfs/pbfs/replicate/primary"
)

func TestAheadGate(t *testing.T) {
	g := newAheadGate()
	stopped := make(chan struct{})
	if g.raised() || g.wait(context.Background(), stopped, nil) != nil {
		t.Fatal("a new gate holds barriers")
	}
	g.set()
	if !g.raised() {
		t.Fatal("set did not raise the gate")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.wait(ctx, stopped, nil); !errors.Is(err, ErrVolumeAhead) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a raised gate past the deadline: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- g.wait(context.Background(), stopped, nil) }()
	select {
	case err := <-done:
		t.Fatalf("passed a raised gate: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.clear()
	if err := <-done; err != nil {
		t.Fatalf("cleared: %v", err)
	}
	g.set()
	close(stopped)
	if err := g.wait(context.Background(), stopped, nil); !errors.Is(err, ErrVolumeAhead) {
		t.Fatalf("the mount stopped: %v", err)
	}
	deposed := make(chan struct{})
	close(deposed)
	if err := g.wait(context.Background(), make(chan struct{}), deposed); !errors.Is(err, primary.ErrDeposed) {
		t.Fatalf("the primary is deposed: %v", err)
	}
}
