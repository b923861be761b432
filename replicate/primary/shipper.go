package primary

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// Errors a shipper reports.
var (
	ErrDeposed      = errors.New("deposed: a backup refused this primary's epoch (a newer term began, or the backups fenced this one)")
	ErrNeedsResync  = errors.New("backup needs a resync")
	errStreamClosed = errors.New("stream closed")
)

// rawSilence is how long a primary waits for a word from a backup before
// it ends the stream: a variable for tests, read when a shipper's dialer
// is made.
var rawSilence = wire.Silence

// Shipper streams the primary's journal to one backup, pipelined, and
// tracks what the backup has acked as durable.
type Shipper struct {
	addr     string
	store    *journal.Store
	volumeID string
	log      *slog.Logger
	m        *shipMetrics
	notify   func()
	conn     *grpc.ClientConn
	raw      wire.Dialer
	// grpcNoted: the fallback to gRPC was logged (session's goroutine only)
	grpcNoted bool

	acked   atomic.Uint64
	applied atomic.Uint64
	// received: the newest seq the backup has acked as received and
	// checksummed, not yet durable (--ack-level memory).
	received   atomic.Uint64
	memory     bool // ask for received acks (Hello.ack_received)
	up         atomic.Bool
	overGRPC   atomic.Bool // the stream that is up is gRPC's: the backup is older than raw streams
	sparseSums atomic.Bool // the backup takes resync sums of data blocks only (Welcome.sparse_sums)
	rootEntry  atomic.Bool // the backup takes a resync entry for the root (Welcome.root_entry)
	allocMap   atomic.Bool // the backup takes resync allocation maps (Welcome.alloc_map)
	// resyncScope: the backup takes targeted resyncs (Welcome.resync_scope)
	resyncScope atomic.Bool
	deposed     atomic.Bool
	stale       atomic.Bool   // the backup's history differs: it needs a resync
	damagedSeq  atomic.Uint64 // the last damaged batch the backup needed (logged once)
	// degraded: dropped from the ack set by the degrade policy (Primary.watch)
	degraded atomic.Bool
	// stalled: the backup reports it cannot apply what it holds
	stalled atomic.Bool

	snaps  Snapshotter                    // nil: resync unavailable
	policy atomic.Pointer[wire.AckPolicy] // announced in Hello (Primary.announce)
	// confirmed is the policy the backup took from this term's last Hello
	// it answered with a Welcome (nil: none yet; it may hold any policy
	// of an earlier term): what its election rule goes by (quorum).
	confirmed atomic.Pointer[wire.AckPolicy]
	added     bool // by AddBackup, while the primary ran (quorum)
	// joining: added while the primary runs, not in the ack set until it
	// caught up (members.go)
	joining atomic.Bool
	force   atomic.Bool // resync at the next session, asked by an operator
	// onResync, if set, runs once after the first resync completes.
	onResync func()
	// onDeposed, if set, runs when the backup refuses this primary's epoch.
	onDeposed func()
	// onJoin, if set, asks the primary to put a joining backup that holds
	// seq in the ack set (Primary.join).
	onJoin func(*Shipper, uint64)
	// hello: end the session and open a new one at once, to tell the
	// backup a new ack policy (rehello)
	hello        atomic.Bool
	cancel       atomic.Pointer[context.CancelFunc]
	stop         context.CancelFunc // ends run (Primary.startShipper)
	outage       outage             // run's: the current outage, for its log lines (outage.go)
	ev           *events.Bus        // state changes, for pbfs events (nil: none)
	shipperState                    // in words, for operators (condition.go)
}

func newShipper(addr, token string, tlsFiles wire.TLSFiles, volumeID string, store *journal.Store, snaps Snapshotter, m *shipMetrics, notify func(), log *slog.Logger) (*Shipper, error) {
	conn, err := wire.DialGRPC(addr, token, tlsFiles,
		// Notice a half-open connection within seconds, not the kernel's
		// fifteen minutes, so barriers do not hang on a dead backup.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(journal.HeaderSize+journal.MaxBodySize+1024)),
	)
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", addr, err)
	}
	raw, err := wire.NewDialer(addr, token, tlsFiles, rawSilence)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("backup %s: %w", addr, err)
	}
	return &Shipper{addr: addr, store: store, volumeID: volumeID, snaps: snaps, log: log.With("backup", addr), m: m, notify: notify, conn: conn, raw: raw}, nil
}

// openStream opens a raw stream to the backup or, when it does not speak
// one, the gRPC stream. Either ends with ctx.
func (s *Shipper) openStream(ctx context.Context) (wire.PrimaryEnd, string, error) {
	raw, err := s.raw.Dial(ctx)
	var refused *wire.Refusal
	switch {
	case err == nil:
		return raw, "raw", nil
	case errors.As(err, &refused):
		return nil, "", s.rejected(refused.Reject)
	case !errors.Is(err, wire.ErrNoRaw):
		return nil, "", err
	}
	if !s.grpcNoted {
		s.grpcNoted = true
		s.log.Info("the backup does not speak the raw stream: streaming over gRPC", "err", err)
	}
	stream, err := replpb.NewReplicationClient(s.conn).Stream(ctx)
	return stream, "grpc", err
}

func (s *Shipper) announced() wire.AckPolicy {
	if p := s.policy.Load(); p != nil {
		return *p
	}
	return wire.AckPolicy{}
}

// Acked returns the newest seq the backup holds durably.
func (s *Shipper) Acked() uint64 { return s.acked.Load() }

// run keeps a stream to the backup up until ctx ends.
func (s *Shipper) run(ctx context.Context) {
	defer s.conn.Close()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := s.session(ctx)
		if s.deposed.Load() {
			// Epochs only grow: no backup will take this primary's
			// stream or resync again. Barriers fail with ErrDeposed.
			s.up.Store(false)
			s.streamDown(err)
			s.m.state.WithLabelValues(s.addr).Set(0)
			s.notify()
			s.log.Error("stopped streaming to the backup: this primary is deposed; stop it, and rejoin it as a backup of the new primary (docs/FAILOVER.md)")
			return
		}
		if s.hello.Swap(false) && ctx.Err() == nil {
			continue // rehello
		}
		if (errors.Is(err, ErrNeedsResync) || s.force.Load()) && s.snaps != nil && ctx.Err() == nil {
			forced := s.force.Swap(false)
			if rerr := s.resync(ctx, forced); s.deposed.Load() {
				continue // refused for a higher epoch: stops above
			} else if rerr != nil {
				err = fmt.Errorf("resync: %w", rerr)
				if forced {
					// An operator asked for it: a backup that was
					// unreachable just then gets it once it is back.
					s.force.Store(true)
					if !s.outage.forceNoted {
						s.outage.forceNoted = true
						s.log.Warn("the resync asked for cannot start yet; it runs once the backup answers", "err", rerr)
					}
				}
			} else {
				continue // stream from the snapshot on
			}
		}
		s.up.Store(false)
		s.streamDown(err)
		s.m.state.WithLabelValues(s.addr).Set(0)
		s.notify()
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > 5*time.Second {
			backoff = 50 * time.Millisecond
		}
		s.noteDown(err, backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		if errors.Is(err, ErrNeedsResync) {
			backoff = 5 * time.Second
		}
	}
}

// rehello ends the session so that a new one's Hello tells the backup the
// policy announce stored; run reconnects at once.
func (s *Shipper) rehello() {
	s.hello.Store(true)
	if c := s.cancel.Load(); c != nil {
		(*c)()
	}
}

// setDeposed records that the backup refused this primary for a higher
// epoch, and tells the primary (Primary.Deposed) and its waiters.
func (s *Shipper) setDeposed() {
	if !s.deposed.Swap(true) {
		s.ev.Emit(events.KindDeposed, "backup", s.addr)
	}
	if s.onDeposed != nil {
		s.onDeposed()
	}
	s.notify()
}

func (s *Shipper) setStalled(v bool) {
	if v && !s.stalled.Swap(true) {
		// A warning: it is resynced next, and a former primary that
		// rejoins always is (its own log says why it stalled).
		s.log.Warn("backup is stalled: it needs a resync, which follows; barriers that need its ack wait until the resync ends (or drop it, with --degrade-after)")
	} else if !v {
		s.stalled.Store(false)
	}
}

// holds reports whether the backup has acked seq: as durable, or, at ack
// level memory, as received.
func (s *Shipper) holds(seq uint64, memory bool) bool {
	return s.acked.Load() >= seq || memory && s.received.Load() >= seq
}

// counts reports whether the backup's acks count toward the ack set.
func (s *Shipper) counts() bool { return !s.degraded.Load() && !s.stalled.Load() }

// ErrRefused: the backup answered, and refused this primary's stream.
var ErrRefused = errors.New("backup refused")

func (s *Shipper) rejected(rej *replpb.Reject) error {
	err := fmt.Errorf("%w: %s: %s", ErrRefused, rej.Code, rej.Reason)
	switch rej.Code {
	case replpb.Reject_STALE_EPOCH:
		s.setDeposed()
		s.log.Error("this primary is deposed: a backup refused its epoch", "reason", rej.Reason)
		return fmt.Errorf("%v: %w", err, ErrDeposed)
	case replpb.Reject_WRONG_VOLUME, replpb.Reject_DIVERGED, replpb.Reject_GAP:
		s.setStale(true)
		return fmt.Errorf("%v: %w", err, ErrNeedsResync)
	}
	return err
}
