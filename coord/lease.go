package coord

import (
	"context"
	"errors"
	"fmt"
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
type lease struct {
	cli *clientv3.Client
	id  clientv3.LeaseID
	ttl time.Duration

	mu    sync.Mutex
	until time.Time // monotonic: valid strictly before
	lost  bool
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
		l.until = until
	}
}

// check fails once the lease may have lapsed.
func (l *lease) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost || !time.Now().Before(l.until) {
		return ErrLeaseLost
	}
	return nil
}

// keep renews the lease every TTL/6 until ctx ends or etcd says it is
// gone; it returns why it stopped. A renewal that fails (etcd electing a
// new leader, the client moving to another member) is retried every
// 100 ms; the deadline keeps running meanwhile.
func (l *lease) keep(ctx context.Context) error {
	for {
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, l.ttl/4)
		resp, err := l.cli.KeepAliveOnce(rctx, l.id)
		cancel()
		wait := l.ttl / 6
		switch {
		case err == nil && resp.TTL > 0:
			l.renewed(sent)
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !isLeaseGone(err):
			wait = 100 * time.Millisecond // etcd unreachable for now
		default:
			l.mu.Lock()
			l.lost = true
			l.mu.Unlock()
			return fmt.Errorf("lease %x: %w", l.id, ErrLeaseLost)
		}
		if l.check() != nil {
			l.mu.Lock()
			l.lost = true
			l.mu.Unlock()
			return fmt.Errorf("lease %x not renewed in time: %w", l.id, ErrLeaseLost)
		}
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

func isLeaseGone(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound)
}
