package capture

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/pbfs/pbfs/journal"
)

// runCommitter starts c.Run until the test ends.
func runCommitter(t *testing.T, c *Committer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitFor waits up to 10 s for cond, failing with what otherwise.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
	}
}

// TestIdleCommitterTakesNoTimerWakeups: the seal timer runs only while a
// batch is open. With a 1 ms interval, a committer with nothing open
// takes no timer wake-up at all (a ticker took one every interval), and
// a batch that opens is still sealed by the timer, without a barrier.
func TestIdleCommitterTakesNoTimerWakeups(t *testing.T) {
	f, h, _ := oneFile(t, Options{Capture: true, Metrics: NewMetrics(nil)})
	store, err := journal.OpenStore(filepath.Join(t.TempDir(), "j"), journal.StoreOptions{LazyAppends: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c := NewCommitter(f, store, time.Millisecond, nil, nil)
	runCommitter(t, c)
	for i := int64(0); i < 3; i++ {
		seq := store.Last().Seq
		if i > 0 {
			if _, err := f.Write(h, i*4096, page, nil); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the open batch was not sealed on the timer", func() bool { return store.Last().Seq > seq && f.Empty() })
		idle := c.timerWakes.Load()
		time.Sleep(50 * time.Millisecond) // 50 intervals
		if n := c.timerWakes.Load() - idle; n != 0 {
			t.Fatalf("round %d: %d timer wake-ups of a committer with nothing open, want 0", i, n)
		}
	}
}
