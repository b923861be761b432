package coord

import (
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

// dial connects to the etcd members at endpoints.
func dial(endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectEvery},
			MinConnectTimeout: 5 * time.Second, // a slow link's TLS handshake still fits
		})}})
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	return cli, nil
}
