package replicate

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

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
	// Each part only if it was opened: OpenBackup closes a backup it
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
