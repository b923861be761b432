package coord

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pbfs/pbfs/internal/etcdtest"
)

// grantLease starts keeping a fresh lease of ttl on c, as a won term does.
func grantLease(t *testing.T, c *etcdtest.Cluster, ttl time.Duration) (*lease, <-chan error) {
	t.Helper()
	cli, err := dial(strings.Split(strings.TrimPrefix(c.Endpoints(), "etcd://"), ","))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	sent := time.Now()
	g, err := cli.Grant(context.Background(), int64(ttl/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l := newLease(cli, g.ID, time.Duration(g.TTL)*time.Second, slog.New(slog.DiscardHandler), newNodeMetrics())
	l.renewed(sent)
	ctx, cancel := context.WithCancel(context.Background())
	kept, done := make(chan error, 1), make(chan struct{})
	go func() { kept <- l.keep(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return l, kept
}

func held(l *lease) bool {
	_, ok := l.state()
	return ok
}

// inDoubt waits until the lease's deadline has passed with no renewal.
func inDoubt(t *testing.T, l *lease) {
	t.Helper()
	for deadline := time.Now().Add(2 * l.ttl); held(l); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the lease stayed valid with etcd down")
		}
	}
}

// TestLeaseRidesOutACoordinatorPause: etcd is unreachable past the
// primary's deadline (as when etcd elects a new leader on a loaded
// machine). Barriers stop returning, but they wait rather than fail, and
// the node is not deposed: etcd had not expired the lease, so the first
// renewal it accepts proves no other node was elected, and the barriers
// return. Before, the node deposed itself at its deadline: a failover
// for a pause of etcd's.
func TestLeaseRidesOutACoordinatorPause(t *testing.T) {
	c := etcdtest.Start(t, 1)
	l, kept := grantLease(t, c, 8*time.Second)
	c.Kill(0)
	inDoubt(t, l)
	// A renewal failed past the deadline, and the node did not give up.
	for deadline := time.Now().Add(10 * time.Second); testutil.ToFloat64(l.m.leaseDoubts) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no renewal failed while etcd was down")
		}
	}
	barrier := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		barrier <- l.wait(ctx)
	}()
	select {
	case err := <-barrier:
		t.Fatalf("a barrier returned (%v) while the lease was in doubt", err)
	case <-time.After(200 * time.Millisecond):
	}
	back := time.Now()
	c.Restart(0)
	if err := <-barrier; err != nil {
		t.Fatalf("the barrier failed once etcd was back: %v", err)
	}
	t.Logf("the barrier returned %v after etcd was restarted", time.Since(back).Round(time.Millisecond))
	select {
	case err := <-kept:
		t.Fatalf("the lease was given up: %v", err)
	default:
	}
	if !held(l) {
		t.Fatal("the lease is not held after a renewal")
	}
	if n := testutil.ToFloat64(l.m.leaseDoubts); n != 1 {
		t.Fatalf("pbfs_node_lease_in_doubt_total = %v, want 1", n)
	}
}

// TestLeaseGivenUpAfterEtcdMayHaveExpiredIt: etcd unreachable until past
// the give-up time: the lease is lost for good, barriers waiting on it
// fail, and a renewal etcd would accept later changes nothing (another
// node may have been elected meanwhile, as far as this one can know).
func TestLeaseGivenUpAfterEtcdMayHaveExpiredIt(t *testing.T) {
	c := etcdtest.Start(t, 1)
	l, kept := grantLease(t, c, 2*time.Second)
	c.Kill(0)
	killed := time.Now()
	inDoubt(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.wait(ctx); !errors.Is(err, ErrLeaseLost) || ctx.Err() != nil {
		t.Fatalf("a barrier waiting on a lease never renewed: %v, want %v before its own deadline", err, ErrLeaseLost)
	}
	if took := time.Since(killed); took < l.ttl {
		t.Fatalf("given up %v after etcd was lost, before etcd itself could expire the lease (TTL %v)", took, l.ttl)
	}
	if err := <-kept; !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("keep ended with %v, want %v", err, ErrLeaseLost)
	}
	c.Restart(0)
	l.renewed(time.Now())
	if err := l.wait(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a lost lease came back: %v", err)
	}
	if n := testutil.ToFloat64(l.m.leaseLost.WithLabelValues("not_renewed")); n != 1 {
		t.Fatalf(`pbfs_node_lease_lost_total{why="not_renewed"} = %v, want 1`, n)
	}
}

// TestLeaseWaitEndsWithTheBarrier: a barrier whose own deadline comes
// while the lease is in doubt fails with ErrLeaseLost, saying so.
func TestLeaseWaitEndsWithTheBarrier(t *testing.T) {
	c := etcdtest.Start(t, 1)
	l, _ := grantLease(t, c, 6*time.Second)
	c.Kill(0)
	inDoubt(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := l.wait(ctx)
	if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait = %v, want %v and the deadline", err, ErrLeaseLost)
	}
}
