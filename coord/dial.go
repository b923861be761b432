package coord

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// reconnectEvery caps how long the client waits between attempts to
// reach an etcd member it lost. gRPC's default backs off to two minutes:
// after etcd was down a few seconds, the first renewal it would accept
// waited seconds for the next attempt, longer than a primary's lease can
// stay in doubt.
const reconnectEvery = 250 * time.Millisecond

// callTimeout bounds every etcd request of the election and of the member
// records. The client sends each request to one member, round robin; a
// member that hangs (stopped, its disk stalled, a VM paused) answers
// nothing, and without a deadline the request waits for it: a backup
// then never takes over while etcd itself has a quorum.
const callTimeout = time.Second

func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, callTimeout)
}

// retried runs an idempotent etcd request up to three times, each bounded
// by callTimeout: the client sends the next try to the next member.
func retried[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range 3 {
		c, cancel := bounded(ctx)
		v, err = f(c)
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	return v, err
}

// dial connects to the etcd members at endpoints.
func dial(endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		// A member that hangs holds its streams (a watch, a keepalive)
		// open forever: ping it, and drop the connection when it does not
		// answer. etcd refuses pings more often than every 5 s by default.
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 2 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectEvery},
			MinConnectTimeout: 5 * time.Second, // a slow link's TLS handshake still fits
		})}})
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	return cli, nil
}
