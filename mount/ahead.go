package mount

import (
	"context"
	"fmt"
	"sync"

	"github.com/pbfs/pbfs/replicate/primary"
)

// aheadGate holds barriers while the volume is ahead of its journal (an
// unclean stop, or changes made while unmounted) and the backups are
// being resynced to it. A barrier that returned before the resync would
// acknowledge writes the backups, fed from the journal alone, may lack;
// one that failed instead (as barriers did before) turned every
// replicated fsync of a restarted database into EIO for the length of the
// resync. So a barrier waits at the gate, as it waits for a slow backup,
// and its own context bounds the wait.
type aheadGate struct {
	mu     sync.Mutex
	open   chan struct{} // closed when the gate is clear
	closed bool          // the gate is raised
}

func newAheadGate() *aheadGate {
	g := &aheadGate{open: make(chan struct{})}
	close(g.open)
	return g
}

// set raises the gate.
func (g *aheadGate) set() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		g.open = make(chan struct{})
	}
}

// clear lowers the gate and lets every waiting barrier on.
func (g *aheadGate) clear() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.closed = false
		close(g.open)
	}
}

// raised tells whether barriers wait.
func (g *aheadGate) raised() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// wait returns once the gate is clear, or fails when ctx ends, the mount
// stops (stopped closed) or the primary is deposed (deposed closed: the
// resync will never end) first.
func (g *aheadGate) wait(ctx context.Context, stopped, deposed <-chan struct{}) error {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return nil
	default:
	}
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for the resync: %w (%w)", ErrVolumeAhead, ctx.Err())
	case <-stopped:
		return fmt.Errorf("wait for the resync: %w: the mount stopped", ErrVolumeAhead)
	case <-deposed:
		return fmt.Errorf("wait for the resync: %w", primary.ErrDeposed)
	}
}
