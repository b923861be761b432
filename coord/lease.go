package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrLeaseLost fails the barriers of a primary whose lease may have
// lapsed: another node may be promoted from then on.
var ErrLeaseLost = errors.New("the primary's lease may have lapsed: this node no longer acknowledges")

// Drift is the clock-rate difference between this node and the etcd
// members allowed for: a lease this node renewed at t stays valid, by its
// own clock, until t + TTL*(1-Drift) - the stop margin (TTL/10).
const Drift = 0.01

// lease is the primary's lease and how long, by this node's clock, it is
// certainly still held. etcd expires a lease TTL after the renewal it
// received last; this node counts from before it sent that renewal, so
// its deadline always falls before etcd's (docs/FAILOVER.md).
//
// Past the deadline the lease is in doubt, not lost: barriers wait, and
// renewals go on until one succeeds (etcd had not expired the lease, so
// no other node can have been elected meanwhile, and barriers return
// again) or until the give-up time, TTL/2 after etcd's own deadline, when
// the node takes itself as deposed. etcd losing its own leader pauses
// renewals for one to two election timeouts and extends every lease when
// it elects another; on a loaded machine that pause can outlast the
// deadline, and it must not cost a failover.
type lease struct {
	cli *clientv3.Client
	id  clientv3.LeaseID
	ttl time.Duration
	log *slog.Logger
	m   *nodeMetrics

	mu      sync.Mutex
	until   time.Time     // monotonic: valid strictly before
	sent    time.Time     // when the newest renewal etcd accepted was sent
	lost    bool          // etcd said it is gone, or the node gave up
	changed chan struct{} // closed (and replaced) when until or lost changes
}

func newLease(cli *clientv3.Client, id clientv3.LeaseID, ttl time.Duration, log *slog.Logger, m *nodeMetrics) *lease {
	return &lease{cli: cli, id: id, ttl: ttl, log: log, m: m, changed: make(chan struct{})}
}

// margin is how long before the lease's end this node stops
// acknowledging.
func (l *lease) margin() time.Duration {
	return time.Duration(float64(l.ttl)*Drift) + l.ttl/10
}

// renewed notes a renewal sent at sent that etcd accepted.
func (l *lease) renewed(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if until := sent.Add(l.ttl - l.margin()); until.After(l.until) && !l.lost {
		l.until, l.sent = until, sent
		l.notifyLocked()
	}
}

// give marks the lease lost for good.
func (l *lease) give() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost = true
	l.notifyLocked()
}

func (l *lease) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// wait returns nil while the lease is certainly held: at once, or, while
// it is in doubt, when a renewal succeeds. It fails once the lease is
// lost, or when ctx ends first. The answer holds at the moment it is
// given: a barrier asks last, just before it returns.
func (l *lease) wait(ctx context.Context) error {
	for {
		l.mu.Lock()
		lost, held, changed, sent := l.lost, time.Now().Before(l.until), l.changed, l.sent
		l.mu.Unlock()
		switch {
		case lost:
			return ErrLeaseLost
		case held:
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%w: no renewal since %v ago: %w", ErrLeaseLost, time.Since(sent).Round(time.Millisecond), ctx.Err())
		}
	}
}

// renewTimeout is how long one renewal may take.
func renewTimeout(ttl time.Duration) time.Duration { return min(ttl/4, 500*time.Millisecond) }

// giveUp is when, with no renewal accepted since sent, the node takes
// itself as deposed: TTL/2 after etcd may have expired the lease.
func (l *lease) giveUp(sent time.Time) time.Time {
	return sent.Add(l.ttl + l.ttl/2)
}

// keep renews the lease every TTL/6 until ctx ends, etcd says it is gone,
// or no renewal succeeded until the give-up time; it returns why it
// stopped. A renewal that fails (etcd electing a new leader, the client
// moving to another member; each is given 500 ms at most) is retried
// every 100 ms.
func (l *lease) keep(ctx context.Context) error {
	// However it stops (etcd says the lease is gone, the node gives up,
	// the term is over), the lease is lost from then on: a barrier that
	// waits on it must not wait for a renewal that never comes.
	defer l.give()
	var doubt time.Time // when the lease went in doubt, if it is
	for {
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, renewTimeout(l.ttl))
		resp, err := l.cli.KeepAliveOnce(rctx, l.id)
		cancel()
		// In doubt as of now, before this renewal counts: a renewal that
		// ends a doubt (etcd back within a request timeout) is told too.
		last, held := l.state()
		if !held && doubt.IsZero() {
			doubt = time.Now()
			l.m.leaseDoubts.Inc()
			l.log.Warn("lease in doubt: no renewal accepted in time; barriers wait while renewals are retried",
				"since_last_renewal", time.Since(last).Round(time.Millisecond), "gives_up_in", time.Until(l.giveUp(last)).Round(time.Millisecond), "err", err)
		}
		wait := l.ttl / 6
		switch {
		case err == nil && resp.TTL > 0:
			l.renewed(sent)
			if !doubt.IsZero() {
				l.log.Warn("lease renewed: barriers return again", "in_doubt_for", time.Since(doubt).Round(time.Millisecond))
				doubt = time.Time{}
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !isLeaseGone(err):
			if !held && !time.Now().Before(l.giveUp(last)) {
				l.m.leaseLost.WithLabelValues("not_renewed").Inc()
				return fmt.Errorf("lease %x not renewed in time: %w", l.id, ErrLeaseLost)
			}
			wait = 100 * time.Millisecond // etcd unreachable for now
		default:
			l.m.leaseLost.WithLabelValues("gone").Inc()
			return fmt.Errorf("lease %x: etcd says it is gone (expired, revoked, or revoked early by an etcd leader back from a pause): %w", l.id, ErrLeaseLost)
		}
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// state is when the newest accepted renewal was sent, and whether the
// lease is certainly held now.
func (l *lease) state() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, !l.lost && time.Now().Before(l.until)
}

func isLeaseGone(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound)
}
