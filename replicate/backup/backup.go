package backup

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/ratelog"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// Config configures a backup.
type Config struct {
	Volume   string // the backup's copy of the volume
	Journal  string // the backup's own journal directory
	Token    string
	Logger   *slog.Logger
	Registry prometheus.Registerer
	// Events, if set, takes the backup's state changes (its primary
	// connecting and going, fences, stalls, resyncs).
	Events *events.Bus
	// Retain keeps applied batches this long before trimming them
	// (default 10 minutes; negative keeps everything).
	Retain time.Duration
	// TLS, if set, requires mutual TLS from primaries.
	TLS wire.TLSFiles
	// FirstTerm: no coordinator ever decided a term for this cluster, so
	// a journal that served a primary is not a deposed one (see
	// Open).
	FirstTerm bool
	// RefusePrimary: fail with ErrPrimaryJournal, before anything is
	// written, when the journal last served a primary (pbfs promote).
	RefusePrimary bool
	// Adopt lets the first resync of a backup that has never served a
	// volume take a Volume that already holds files (resync.go,
	// "adopt"); without it such a resync is refused.
	Adopt bool
	// JournalReserve is the space kept free on the journal's file system
	// (0: journal.DefaultReserve); batches that would cut into it are
	// refused, not acked.
	JournalReserve int64
	// Guarded: the caller holds Volume mounted nosuid,nodev
	// (apply.GuardCopy) for longer than the backup lives (a pbfs node,
	// whose FUSE mount goes over the copy on promotion); otherwise the
	// backup guards it while it runs.
	Guarded bool
	// AcceptEpoch: a primary may raise the backup's epoch up to this one
	// however far above it is (the operator's --accept-epoch); otherwise
	// by at most MaxEpochStep (epoch.go).
	AcceptEpoch uint64
	// EpochIssued, if set, is asked about every epoch a primary would
	// raise the backup's to, and replaces MaxEpochStep: nil if its
	// coordinator issued it, an error wrapping ErrEpochNotIssued if not
	// (pbfs node: etcd's term records).
	EpochIssued func(ctx context.Context, epoch uint64) error
	// RepairEpoch replaces an epoch no term can take (wire.MaxEpoch or above,
	// stored by a Hello before backups refused such epochs) when the
	// backup opens; an epoch in range is left alone.
	RepairEpoch uint64
}

// ErrVolumeBusy refuses a volume another backup, or a pbfs mount, already serves.
var ErrVolumeBusy = errors.New("another pbfs process serves this volume")

// ErrClosed is Serve's answer once Close has begun.
var ErrClosed = errors.New("backup closed")

// Backup receives one primary's batches, makes them durable, acks them and
// applies them in order to its volume.
type Backup struct {
	replpb.UnimplementedReplicationServer
	cfg     Config
	log     *slog.Logger
	store   *journal.Store
	applier *apply.Applier
	decoded decodedBatches // stored by the stream, for the apply loop
	mark    *applyMark
	prog    *progress   // applied and applying, durable (progress.go)
	lock    *volumeLock // the volume, flocked and guarded for the life of the backup
	m       *backupMetrics

	mu       sync.Mutex
	volumeID string
	policy   wire.AckPolicy // the last primary's (policy.go)
	active   *session       // the primary stream being served, if any
	streams  atomic.Int32   // primary streams admitted and not ended yet

	// fenced is the epoch the backup was fenced at (fence.go): primaries
	// of it or below are refused. Written under mu.
	fenced atomic.Uint64
	// recvMu guards fencing, the epoch a Fence under way refuses from its
	// start (it stops acks as received at once, and waits for those sent
	// to be stored), and recvAcked, the newest batch of the session acked
	// as received.
	recvMu    sync.Mutex
	fencing   uint64
	recvAcked uint64
	// resyncMu is held while a resync handles a message, and by the start
	// of the next (resync.go).
	resyncMu sync.Mutex

	applied atomic.Uint64 // newest batch applied to the volume
	synced  atomic.Uint64 // newest batch applied and synced (the progress file's "applied")
	// resyncs counts resyncs begun: one replaces the volume under an
	// apply window (applier.go).
	resyncs atomic.Uint64
	// formerEpoch, if not 0: the journal last served the primary of that
	// epoch, and no resync has come since (see Open); kept in
	// formerPrimaryKey.
	formerEpoch uint64
	// complete is the newest durable seq that ends a seal (a batch
	// without journal.FlagMore): the applier never starts a group of
	// batches it does not hold whole, so the volume only ever takes
	// states the primary had.
	complete atomic.Uint64
	// progress is closed and replaced when applied advances. It has a
	// lock of its own: the applier signals every batch, and mu is held
	// through each synced append, which it must not wait for.
	progressMu sync.Mutex
	progress   chan struct{}
	stalled    atomic.Bool // apply failed: the volume needs a resync
	// blocked: a batch that fails for want of a resource, retried
	// (applyblock.go); nil while the backup applies.
	blocked atomic.Pointer[applyBlock]
	// retrySeq is a torn batch whose recovery failed for want of a
	// resource, with that error, for the apply loop to retry first.
	retrySeq uint64
	retryErr error
	kick     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	srv      *grpc.Server // guarded by mu
	// closed is set, under mu, once Close has begun: a Serve that starts
	// after it (a goroutine Close overtook) refuses instead of serving a
	// closed journal on a port nobody would stop.
	closed bool
	// raws are the raw streams' connections (serve.go), guarded by
	// mu; nil once the backup is closing.
	raws   map[net.Conn]struct{}
	rawWG  sync.WaitGroup
	floods *ratelog.Limiter // the lines of serve.go's flood
	loops  sync.WaitGroup
}

// heartbeatEvery is how often a backup acks with nothing new: a
// variable for tests, read when a stream's store loop starts.
var heartbeatEvery = wire.Heartbeat

type session struct {
	epoch  uint64
	cancel context.CancelFunc
}

// Open opens the backup's journal and volume.
func Open(cfg Config) (b *Backup, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := checkBackup(cfg); err != nil {
		return nil, err
	}
	if cfg.Retain == 0 {
		cfg.Retain = 10 * time.Minute
	}
	b = &Backup{cfg: cfg, log: cfg.Logger, kick: make(chan struct{}, 1), done: make(chan struct{}), progress: make(chan struct{}),
		raws: map[net.Conn]struct{}{}, floods: ratelog.New(floodEvery)}
	// One way back from any step below: Close releases whatever was
	// opened, in order.
	defer func() {
		if err != nil {
			b.Close()
			b = nil
		}
	}()
	if err := b.openParts(); err != nil {
		return b, err
	}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(b.store.SpaceCollectors()...)
		cfg.Registry.MustRegister(b.store.CheckCollectors()...)
	}
	b.m = newBackupMetrics(cfg.Registry)
	if err := b.loadState(); err != nil {
		return b, err
	}
	applied, applying, err := b.prog.loadOrMigrate(b.store)
	if err != nil {
		return b, err
	}
	if err := b.recover(applied, applying); err != nil {
		return b, err
	}
	b.startLoops()
	return b, nil
}
