package capture

import (
	"context"
	"time"
)

// Run seals until ctx ends, then seals what is left. It wakes only for
// work, so an idle mount takes no wake-up at all (a ticker used to wake
// every mount 20 times a second):
//
//   - a size request seals at once;
//   - the seal timer runs while a batch is open: it starts at the batch's
//     first op, so a batch waits at most the interval for a barrier;
//   - the retry ticker runs while a batch the journal refused is held, be
//     it Run's, a barrier's or a snapshot's: it retries every interval,
//     and at least every retryEvery however long the interval.
//
// Only a retry ends a refusal: the journal refuses the service's writes
// while its last append was refused (journal.Store.Writable), whatever
// room there is since, until an append goes in. So once the disk has
// room again, the retry ticker is what lets writes in again, and it must
// run for as long as a batch is held.
func (c *Committer) Run(ctx context.Context) {
	t := newSealTimers(c.interval)
	defer t.stop()
	for {
		sealC, retryC := t.arm(c.holding.Load(), !c.fs.Empty())
		var openC <-chan struct{}
		if sealC == nil && retryC == nil {
			openC = c.fs.Opened() // idle: wait for the first op
		}
		trigger := "timer"
		select {
		case <-ctx.Done():
			c.final()
			return
		case <-openC:
			continue
		case <-c.heldSig:
			continue
		case <-sealC:
			t.sealFired()
			c.timerWakes.Add(1)
		case <-retryC:
			c.timerWakes.Add(1)
		case <-c.fs.SealRequests():
			trigger = "size"
		}
		if _, err := c.commit(ctx, trigger); err != nil && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// final seals what is left when Run ends.
func (c *Committer) final() {
	if _, err := c.commit(context.Background(), "close"); err != nil {
		c.log.Error("final seal failed", "err", err)
	}
}

// hold records that a refused batch is held, and tells Run, which then
// retries it on its retry ticker: Run may be idle, or waiting on a seal
// timer up to an hour long, when a barrier's commit is refused. The
// caller holds sem.
func (c *Committer) hold() {
	c.holding.Store(true)
	select {
	case c.heldSig <- struct{}{}:
	default:
	}
}

// retryEvery bounds how long a refused batch waits to be tried again.
const retryEvery = time.Second

// sealTimers are Run's two timers, each running only while there is work
// for it: the seal timer while a batch is open, the retry ticker while a
// refused batch is held.
type sealTimers struct {
	interval time.Duration
	seal     *time.Timer
	sealing  bool // the seal timer is armed for the open batch
	retry    *time.Ticker
	retrying bool // the retry ticker runs
}

func newSealTimers(interval time.Duration) *sealTimers {
	t := &sealTimers{interval: interval, seal: time.NewTimer(time.Hour), retry: time.NewTicker(time.Hour)}
	t.seal.Stop()
	t.retry.Stop()
	return t
}

// arm starts or stops the timers for the committer's state (a batch
// held, a batch open) and returns the channels Run waits on, nil for a
// timer that is stopped. While a batch is held only the retry ticker
// runs: a retry seals the open batch too once the held one is in.
func (t *sealTimers) arm(holding, open bool) (seal, retry <-chan time.Time) {
	if holding {
		if t.sealing {
			t.seal.Stop()
			t.sealing = false
		}
		if !t.retrying {
			t.retry.Reset(min(t.interval, retryEvery))
			t.retrying = true
		}
		return nil, t.retry.C
	}
	if t.retrying {
		t.retry.Stop()
		t.retrying = false
	}
	if !open {
		if t.sealing {
			t.seal.Stop() // a barrier sealed the batch first
			t.sealing = false
		}
		return nil, nil
	}
	if !t.sealing {
		t.seal.Reset(t.interval)
		t.sealing = true
	}
	return t.seal.C, nil
}

// sealFired records that the seal timer fired: the next batch to open
// arms it again.
func (t *sealTimers) sealFired() { t.sealing = false }

func (t *sealTimers) stop() {
	t.seal.Stop()
	t.retry.Stop()
}
