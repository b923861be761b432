package proxy

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// committer shares barriers among held responses (group commit). A
// response waits for a barrier that starts after it asked. Up to
// inflight barriers run at once (pbfs pipelines them: each seals what
// was written since the one before); while all are busy, every response
// that asks joins the next one to start. So an idle proxy takes a barrier
// at once for a lone response (no fixed delay), and under load each
// barrier covers everything that became ready while the others ran:
// groups grow with the load.
type committer struct {
	barrier  func(context.Context) (uint64, error)
	timeout  time.Duration
	inflight int
	m        *metrics

	mu      sync.Mutex
	running int
	next    *round
}

type round struct {
	done    chan struct{}
	waiters int
	seq     uint64
	err     error
}

// wait returns once a barrier that started after the call has returned,
// with its seq or its error, when ctx ends, or after the barrier timeout
// (with context.DeadlineExceeded). A response that joins the next round
// while every barrier runs would otherwise wait for one to end first, and
// then for its own: up to twice the timeout, or longer.
func (c *committer) wait(ctx context.Context) (uint64, error) {
	c.mu.Lock()
	if c.next == nil {
		c.next = &round{done: make(chan struct{})}
	}
	r := c.next
	r.waiters++
	if c.running < c.inflight {
		c.launch()
	}
	c.mu.Unlock()
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case <-r.done:
		return r.seq, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-t.C:
		return 0, fmt.Errorf("no barrier within %v: %w", c.timeout, context.DeadlineExceeded)
	}
}

// launch starts the barrier for c.next; c.mu is held.
func (c *committer) launch() {
	r := c.next
	c.next = nil
	c.running++
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		start := time.Now()
		r.seq, r.err = c.barrier(ctx)
		cancel()
		c.m.barrierSeconds.Observe(time.Since(start).Seconds())
		c.m.groupSize.Observe(float64(r.waiters))
		if r.err != nil {
			c.m.barrierFailures.Inc()
		}
		close(r.done)
		c.mu.Lock()
		c.running--
		if c.next != nil && c.running < c.inflight {
			c.launch()
		}
		c.mu.Unlock()
	}()
}
