package proxy

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// queue bounds the requests using upstream connections (pool) and gives
// a freed slot to the request that has waited longest: while the service
// is not up yet, requests wait in the order they came and are sent in
// that order.
type queue struct {
	mu      sync.Mutex
	free    int
	waiters list.List // of *waiter, oldest first
}

type waiter struct {
	ready   chan struct{}
	granted bool
}

func newQueue(n int) *queue { return &queue{free: n} }

// acquire takes a slot, waiting at most until deadline() (asked again
// when it passes: a request's wait may grow while it waits) or ctx ends.
func (q *queue) acquire(ctx context.Context, deadline func() time.Time) bool {
	q.mu.Lock()
	if q.free > 0 {
		q.free--
		q.mu.Unlock()
		return true
	}
	w := &waiter{ready: make(chan struct{})}
	e := q.waiters.PushBack(w)
	q.mu.Unlock()
	t := time.NewTimer(time.Until(deadline()))
	defer t.Stop()
	for {
		select {
		case <-w.ready:
			return true
		case <-ctx.Done():
		case <-t.C:
			if d := time.Until(deadline()); d > 0 {
				t.Reset(d)
				continue
			}
		}
		break
	}
	q.mu.Lock()
	granted := w.granted
	if !granted {
		q.waiters.Remove(e)
	}
	q.mu.Unlock()
	if granted { // given a slot as it gave up: pass it on
		q.release()
	}
	return false
}

// release gives a slot back, to the longest waiting request if any.
func (q *queue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.waiters.Front(); e != nil {
		w := q.waiters.Remove(e).(*waiter)
		w.granted = true
		close(w.ready)
		return
	}
	q.free++
}
