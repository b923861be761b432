package replicate

import (
	"context"
	"path"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// callsAtOnce bounds the calls of each kind a backup serves at once: each
// may hold a message of up to a batch's size while it is read, however
// many connections a token holder opens. A primary makes one stream and
// one resync at a time; the second of each covers a reconnection while
// its old connection is still open.
var callsAtOnce = map[string]int{
	replpb.Replication_Stream_FullMethodName:   2,
	replpb.Replication_Resync_FullMethodName:   2,
	replpb.Replication_Report_FullMethodName:   4,
	replpb.Replication_Manifest_FullMethodName: 2,
}

// tapToken checks a call's token when its headers arrive, before any of
// its messages is read (gRPC reads a unary call's request before any
// interceptor runs), and refuses it with Unauthenticated without the
// token, or ResourceExhausted when as many calls of its kind are being
// served. A call with the token marks its connection authenticated
// (peers.go). It runs under the connection's lock: no waiting.
func (b *Backup) tapToken(g *peerGate) tap.ServerInHandle {
	var mu sync.Mutex
	serving := map[string]int{}
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if err := wire.CheckToken(info.Header, b.cfg.Token, b.refusedCaller); err != nil {
			return nil, err
		}
		if p, ok := peer.FromContext(ctx); ok {
			g.authenticated(p.Addr)
		}
		limit, ok := callsAtOnce[info.FullMethodName]
		if !ok {
			return ctx, nil // gRPC answers Unimplemented, reading nothing
		}
		mu.Lock()
		defer mu.Unlock()
		if serving[info.FullMethodName] >= limit {
			b.m.busy.WithLabelValues(path.Base(info.FullMethodName)).Inc()
			b.flood("busy "+info.FullMethodName, "refused a call: as many of its kind are being served", "method", info.FullMethodName, "at_once", limit)
			return nil, status.Errorf(codes.ResourceExhausted, "pbfs backup: %d %s calls are being served; retry when one ends", limit, path.Base(info.FullMethodName))
		}
		serving[info.FullMethodName]++
		// The call's context ends with the call.
		context.AfterFunc(ctx, func() {
			mu.Lock()
			serving[info.FullMethodName]--
			mu.Unlock()
		})
		return ctx, nil
	}
}
