package replicate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/pathcheck"
	"github.com/pbfs/pbfs/internal/ratelog"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
)

// BackupConfig configures a backup.
type BackupConfig struct {
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
	TLS TLSFiles
	// FirstTerm: no coordinator ever decided a term for this cluster, so
	// a journal that served a primary is not a deposed one (see
	// OpenBackup).
	FirstTerm bool
	// RefusePrimary: fail with ErrPrimaryJournal, before anything is
	// written, when the journal last served a primary (pbfs promote).
	RefusePrimary bool
	// Adopt lets the first resync of a backup that has never served a
	// volume take a Volume that already holds files (resync_backup.go,
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
	// RepairEpoch replaces an epoch no term can take (MaxEpoch or above,
	// stored by a Hello before backups refused such epochs) when the
	// backup opens; an epoch in range is left alone.
	RepairEpoch uint64
}

// The journal's role, in its metadata: a journal a primary used and a
// backup then opens needs a resync first.
var (
	RoleKey     = journal.KeyRole.Name
	RolePrimary = "primary"
	RoleBackup  = "backup"
	// AckedKey: the newest seq a primary's barrier returned (roughly; it
	// is written every second).
	AckedKey = journal.KeyAcked.Name
	// AheadKey: the first seq a primary's volume may be ahead of its
	// journal from (a crash, an offline change); its backups are resynced
	// from the volume before anything is shipped (mount).
	AheadKey = journal.KeyAhead.Name
)

// ErrVolumeBusy refuses a volume another backup, or a pbfs mount, already serves.
var ErrVolumeBusy = errors.New("another pbfs process serves this volume")

// ErrClosed is Serve's answer once Close has begun.
var ErrClosed = errors.New("backup closed")

// Backup receives one primary's batches, makes them durable, acks them and
// applies them in order to its volume.
type Backup struct {
	replpb.UnimplementedReplicationServer
	cfg     BackupConfig
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
	policy   AckPolicy    // the last primary's (report.go)
	active   *session     // the primary stream being served, if any
	streams  atomic.Int32 // primary streams admitted and not ended yet

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
	// of the next (resync_backup.go).
	resyncMu sync.Mutex

	applied atomic.Uint64 // newest batch applied to the volume
	synced  atomic.Uint64 // newest batch applied and synced (the progress file's "applied")
	// resyncs counts resyncs begun: one replaces the volume under an
	// apply window (applier.go).
	resyncs atomic.Uint64
	// formerEpoch, if not 0: the journal last served the primary of that
	// epoch, and no resync has come since (see OpenBackup); kept in
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
	// raws are the raw streams' connections (rawlisten.go), guarded by
	// mu; nil once the backup is closing.
	raws  map[net.Conn]struct{}
	rawWG sync.WaitGroup
	// grpcOnly serves the stream over gRPC alone, as backups before the
	// raw stream did (tests of the primary's fallback).
	grpcOnly bool
	floods   *ratelog.Limiter // the lines of backupserve.go's flood
	// heartbeat is how often a stream acks with nothing new (heartbeatEvery).
	heartbeat time.Duration
	loops     sync.WaitGroup
}

type session struct {
	epoch  uint64
	cancel context.CancelFunc
}

// OpenBackup opens the backup's journal and volume.
func OpenBackup(cfg BackupConfig) (*Backup, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Token == "" {
		return nil, ErrNoToken
	}
	// A journal inside the volume would be removed by the first resync,
	// which makes the volume equal to the primary's.
	if err := pathcheck.Outside(cfg.Journal, cfg.Volume); err != nil {
		return nil, err
	}
	// A volume a pbfs mount serves is the primary's: batches applied
	// into it would be captured again.
	if point, err := pathcheck.ServedBy(cfg.Volume); err != nil {
		return nil, fmt.Errorf("backup volume %s: %w", cfg.Volume, err)
	} else if point != "" {
		return nil, fmt.Errorf("backup volume %s: it lies on the pbfs mount at %s: %w", cfg.Volume, point, ErrVolumeBusy)
	}
	// One backup per volume: two would apply every batch twice.
	lock, err := lockVolume(cfg.Volume, cfg.Guarded)
	if err != nil {
		return nil, err
	}
	if lock.guard != nil {
		cfg.Logger.Info("the copy is mounted nosuid,nodev while the backup serves it", "volume", cfg.Volume, "guard", lock.guard.How)
	}
	st, err := journal.OpenStore(cfg.Journal, journal.StoreOptions{Logger: cfg.Logger, Reserve: cfg.JournalReserve})
	if err != nil {
		lock.Close()
		return nil, err
	}
	if role, _ := st.Meta(RoleKey); cfg.RefusePrimary && string(role) == RolePrimary {
		st.Close()
		lock.Close()
		return nil, ErrPrimaryJournal
	}
	ap, err := apply.New(cfg.Volume, cfg.Logger)
	if err != nil {
		lock.Close()
		st.Close()
		return nil, err
	}
	if err := ap.Protect(cfg.Journal); err != nil {
		lock.Close()
		ap.Close()
		st.Close()
		return nil, err
	}
	mark, err := openApplyMark(cfg.Journal)
	if err != nil {
		lock.Close()
		ap.Close()
		st.Close()
		return nil, err
	}
	ap.SetMarker(mark.write)
	prog, err := openProgress(cfg.Journal)
	if err != nil {
		mark.close()
		lock.Close()
		ap.Close()
		st.Close()
		return nil, err
	}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(st.SpaceCollectors()...)
		cfg.Registry.MustRegister(st.CheckCollectors()...)
	}
	b := &Backup{cfg: cfg, log: cfg.Logger, store: st, applier: ap, mark: mark, prog: prog, lock: lock, m: newBackupMetrics(cfg.Registry),
		kick: make(chan struct{}, 1), done: make(chan struct{}), progress: make(chan struct{}), raws: map[net.Conn]struct{}{},
		heartbeat: heartbeatEvery, floods: ratelog.New(floodEvery)}
	vid, err := st.Meta(journal.KeyVolume.Name)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.volumeID = string(vid)
	if p, err := st.Meta(policyKey); err == nil {
		b.policy = decodePolicy(p)
	}
	if f, err := st.MetaUint(fencedKey); err == nil {
		b.fenced.Store(f)
		b.m.fenced.Set(float64(f))
	}
	if err := b.repairEpoch(cfg.RepairEpoch); err != nil {
		b.Close()
		return nil, err
	}
	applied, applying, err := prog.loadOrMigrate(st)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.applied.Store(applied)
	b.synced.Store(applied)
	b.complete.Store(lastComplete(st))
	marked := false // the volume was just marked for a resync, and the log said why
	if role, _ := st.Meta(RoleKey); string(role) == RolePrimary && cfg.FirstTerm {
		// The journal of a primary that ran before any coordinator (pbfs
		// mount, then pbfs node): its volume is the authoritative copy,
		// holding every batch (a crash of that mount shows in its open
		// marker, which the next mount on it acts on).
		b.log.Info("this journal served a primary before the coordinator's first term; its volume holds all of it", "seq", st.Last().Seq)
		b.applied.Store(st.Last().Seq)
		b.synced.Store(st.Last().Seq)
		applying = 0
		if err := prog.save(st.Last().Seq, 0); err != nil {
			b.Close()
			return nil, err
		}
	} else if former, _ := st.MetaUint(formerPrimaryKey); former > 0 && string(role) != RolePrimary {
		b.formerEpoch = former // restarted before the resync that ends it
	} else if string(role) == RolePrimary {
		// The journal last served a primary (a deposed one, rejoining):
		// its volume holds what that primary applied, journaled or not,
		// and its tail may not be in the new primary's history. Only a
		// resync brings it back; what that discards is kept aside.
		marked = true
		b.log.Warn("this journal last served a primary; the volume waits for a resync from the current one")
		b.formerEpoch = max(st.Epoch(), 1)
		if err := st.SetMetaUint(formerPrimaryKey, b.formerEpoch); err != nil {
			b.Close()
			return nil, err
		}
		if err := st.SetMetaUint(journal.KeyStalled.Name, st.Last().Seq+1); err != nil {
			b.Close()
			return nil, err
		}
		if err := st.SetMeta(RoleKey, []byte(RoleBackup)); err != nil {
			b.Close()
			return nil, err
		}
	}
	if last := st.Last().Seq; b.applied.Load() > last {
		// The journal always keeps its newest batch and a backup applies
		// only what it holds: a journal that ends before what was applied
		// lost batches (a segment deleted or damaged), and what it asks
		// for next would be applied twice. Only a resync is sure.
		b.log.Error("the journal ends before what the volume applied: it lost batches; the volume waits for a resync", "journal_last", last, "applied", b.applied.Load())
		marked = true
		if err := st.SetMetaUint(journal.KeyStalled.Name, last+1); err != nil {
			b.Close()
			return nil, err
		}
	}
	if stalled, _ := st.MetaUint(journal.KeyStalled.Name); stalled > 0 {
		b.stalled.Store(true)
		if !marked {
			// Not said above: an earlier run found it (an apply that
			// failed, a journal that lost batches, a primary's journal).
			b.log.Error("this backup's volume needs a resync: an earlier run stopped applying at this seq (an apply failed, the journal lost batches, or it had served a primary)", "seq", stalled)
		}
	} else if applying > b.applied.Load() {
		b.recoverTorn(applying)
	} else {
		b.recoverWindow()
	}
	b.loops.Add(1)
	go func() { defer b.loops.Done(); b.applyLoop() }()
	b.loops.Add(1)
	go func() { defer b.loops.Done(); st.CheckBatches(b.doneCtx()) }() // the older segments (journal/check.go)
	if cfg.Retain == 0 {
		cfg.Retain = 10 * time.Minute
	}
	b.cfg.Retain = cfg.Retain
	if cfg.Retain > 0 {
		r := &journal.Retention{Store: st, Window: cfg.Retain, SafeSeq: b.synced.Load,
			Every: min(10*time.Second, cfg.Retain), Logger: b.log}
		b.loops.Add(1)
		go func() { defer b.loops.Done(); r.Run(b.doneCtx()) }()
	}
	return b, nil
}
