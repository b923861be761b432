package backup

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// A backup's port: gRPC and the raw stream (wire.Listener) share it, and
// Close stops both.

// Serve answers primaries on ln until Close, over the raw stream and,
// for primaries from before it, over gRPC.
func (b *Backup) Serve(ln net.Listener) error { return b.serve(ln, true) }

// serve answers primaries on ln; without raw, over gRPC alone, as backups
// from before the raw stream did.
func (b *Backup) serve(ln net.Listener, raw bool) error {
	opts := []grpc.ServerOption{}
	var tlsCfg *tls.Config
	if b.cfg.TLS.Enabled() {
		var err error
		if tlsCfg, err = b.cfg.TLS.ServerConfig(); err != nil {
			ln.Close() // no port left open that nothing answers
			return fmt.Errorf("serve: %w", err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg.Clone())))
	}
	gate := newPeerGate(b.m, b.flood)
	srv0 := grpc.NewServer(append(opts,
		grpc.InTapHandle(b.tapToken(gate)),
		grpc.MaxHeaderListSize(wire.MaxHeaderList),
		grpc.MaxRecvMsgSize(journal.HeaderSize+journal.MaxBodySize+1024),
		grpc.MaxConcurrentStreams(4),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	)...)
	replpb.RegisterReplicationServer(srv0, b)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	b.srv = srv0
	srv := srv0
	b.mu.Unlock()
	b.log.Info("backup serving", "addr", ln.Addr().String(), "volume", b.cfg.Volume,
		"durable_seq", b.store.Last().Seq, "applied_seq", b.applied.Load(), "epoch", b.store.Epoch(), "retain", retainWords(b.cfg.Retain))
	var rawConn func(net.Conn)
	if raw {
		rawConn = func(c net.Conn) { b.serveRaw(c, tlsCfg, gate) }
	}
	return srv.Serve(wire.NewListener(ln, gate.admit, rawConn, b.acceptFailed))
}

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

// A backup's raw streams: the listener (wire.Listener) hands each one
// here, and Close ends them all.

// serveRaw serves one raw stream until it ends or the backup closes.
func (b *Backup) serveRaw(c net.Conn, tlsCfg *tls.Config, gate *peerGate) {
	if !b.trackRaw(c) {
		c.Close()
		return
	}
	defer b.untrackRaw(c)
	s, err := wire.Accept(c, tlsCfg, b.cfg.Token, b.refusedCaller)
	if err != nil {
		b.log.Debug("raw stream not opened", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	gate.authenticated(c.RemoteAddr())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = b.serveStream(ctx, s)
	b.log.Debug("raw stream ended", "remote", c.RemoteAddr().String(), "err", err)
}

// trackRaw notes a raw stream's connection, for Close to end it; false
// once the backup is closing.
func (b *Backup) trackRaw(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.raws == nil {
		return false
	}
	b.raws[c] = struct{}{}
	b.rawWG.Add(1)
	return true
}

func (b *Backup) untrackRaw(c net.Conn) {
	c.Close()
	b.mu.Lock()
	delete(b.raws, c)
	b.mu.Unlock()
	b.rawWG.Done()
}

// closeRaws ends every raw stream and waits until none is served.
func (b *Backup) closeRaws() {
	b.mu.Lock()
	for c := range b.raws {
		c.Close()
	}
	b.raws = nil
	b.mu.Unlock()
	b.rawWG.Wait()
}

// acceptFailed counts a connection the port could not accept and logs
// it, once every floodEvery while it goes on: gRPC's Serve pauses (5 ms,
// doubling to 1 s) before it accepts again, and the streams already up
// carry on.
func (b *Backup) acceptFailed(err error) {
	b.m.accepts.Inc()
	if ok, held := b.floods.Allow("accept", time.Now()); ok {
		b.log.Error("cannot accept connections; retrying after a pause", "err", err, "held_back", held)
	}
}

func (b *Backup) refusedCaller(reason string) {
	b.m.authFailures.Inc()
	b.flood("refused "+reason, "refused a caller", "reason", reason)
}

// flood logs a line of a kind that may come in floods (a peer's refused
// calls and connections) once every floodEvery, with how many lines of
// it were held back since.
func (b *Backup) flood(kind, msg string, args ...any) {
	if ok, held := b.floods.Allow(kind, time.Now()); ok {
		b.log.Warn(msg, append(args, "held_back", held)...)
	}
}

// Close stops serving and applying.
func (b *Backup) Close() error {
	b.stopOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		srv := b.srv
		b.mu.Unlock()
		if srv != nil {
			srv.Stop()
		}
		b.closeRaws()
		close(b.done)
	})
	// The store and the volume stay open until the loops that use them end.
	b.loops.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	// Each part only if it was opened: Open closes a backup it
	// could not finish opening.
	if b.applier != nil {
		b.applier.Close()
	}
	if b.mark != nil {
		b.mark.close()
	}
	if b.prog != nil {
		b.prog.close()
	}
	if b.lock != nil {
		b.lock.Close()
	}
	if b.store == nil {
		return nil
	}
	return b.store.Close()
}

// doneCtx returns a context that ends when Close begins, for the loops
// Close waits for.
func (b *Backup) doneCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-b.done; cancel() }()
	return ctx
}

// retainWords says how long applied batches stay in the journal.
func retainWords(d time.Duration) string {
	if d < 0 {
		return "everything"
	}
	return d.String()
}
