package proxy

import (
	"context"
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
// with its seq or its error, or when ctx ends.
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
	select {
	case <-r.done:
		return r.seq, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
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
