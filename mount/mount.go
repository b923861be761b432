// Package mount assembles a running pbfs primary: it opens the backing
// directory and the journal, mounts the capture filesystem, runs the
// committer and serves the control socket. The CLI and the tests share it.
package mount

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/capture"
	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/fs"
	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/pathcheck"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/host"
	"github.com/pbfs/pbfs/replicate/primary"
	"github.com/pbfs/pbfs/replicate/wire"
)

// ErrJournalInVolume refuses a journal directory inside the volume.
var ErrJournalInVolume = pathcheck.ErrInside

// ErrVolumeAhead names what a barrier waits for while a replicating
// primary's volume may hold changes its journal lacks (it crashed after
// applying writes it had not journaled) and its backups are being resynced
// to the volume: fed from the journal alone they would silently differ. A
// barrier whose context ends before the resync fails with it.
var ErrVolumeAhead = errors.New("the volume may hold changes the journal lacks (an unclean stop, a change while unmounted, lost batches or new local-only rules): backups need a resync")

// ErrNotJournaled: the mount stopped with captured changes the journal
// refused (a full journal disk, say); the volume has them, the journal
// does not, and the next mount resyncs every backup from the volume.
var ErrNotJournaled = errors.New("changes applied to the volume were not journaled; the next mount resyncs the backups")

// Config describes one mount.
type Config struct {
	Mountpoint string // where the service sees the volume
	Backing    string // the directory that holds it; empty means Mountpoint itself
	Journal    string // journal directory, outside the volume

	AllowOther    bool
	NoCapture     bool
	WriteDiff     bool
	NoXattrs      bool
	MaxBatchBytes int64
	SealInterval  time.Duration
	// JournalReserve is the space kept free on the journal's file system
	// (0: journal.DefaultReserve); below it appends and the service's
	// writes are refused with ENOSPC.
	JournalReserve int64
	Logger         *slog.Logger

	// Backups are the addresses of `pbfs backup` processes to ship to;
	// Ack is the ack policy (all, majority, none or a number) and Token the
	// shared secret they check.
	Backups []string
	Ack     string
	Token   string
	// DegradeAfter drops a backup that has been behind this long from the
	// ack set (marking it stale); zero makes barriers wait for it.
	DegradeAfter time.Duration
	// MinBackups: at least this many backups hold a batch before its
	// barrier returns (primary.Config.MinBackups).
	MinBackups int

	// Retain keeps batches every backup holds for this long before
	// trimming them; RetainMax trims any batch older than that (a backup
	// that has not acked it will need a resync). Zero means the default:
	// with backups 10 minutes and 24 hours, without them keep everything.
	// A negative Retain keeps everything; a negative RetainMax sets no age
	// limit.
	Retain, RetainMax time.Duration

	// TLS, if set, uses mutual TLS to the backups.
	TLS wire.TLSFiles

	// Epoch, if above the journal's, raises it durably before anything is
	// shipped: a promoted primary starts a new term this way, and backups
	// then refuse the old primary (fencing).
	Epoch uint64

	// Promoted: the volume was just brought to the journal's last whole
	// seal (pbfs promote), so it is not checked against the fingerprint of
	// a clean stop it never had.
	Promoted bool

	// Dynamic: backups may be added while the mount runs (AddBackup); the
	// replication side starts even with none.
	Dynamic bool

	// Lease, if set, is asked as every barrier is about to return: it
	// waits while the coordinator's lease is in doubt, and an error (the
	// lease may have expired) fails the barrier, so a deposed primary
	// never acknowledges.
	Lease func(context.Context) error

	// Plugins are started once the mount serves and stopped before it
	// unmounts; PluginLogLevel is the level they log at.
	Plugins        []host.Spec
	PluginLogLevel string

	// Rules classify paths before any hint plugin's (hints.go): local-only
	// paths and fsync policies. Fsync is the policy of every path no rule
	// gives one (default: local).
	Rules []sdk.Rule
	Fsync sdk.FsyncPolicy
	// TrustVolume serves a volume ErrVolumeUntrusted would refuse.
	TrustVolume bool
	// AckLevel: what a backup's ack means, disk (default) or memory
	// (primary.Config.AckLevel).
	AckLevel string
	// BeforeUnlock, if set, runs as Close ends, just before the backing
	// directory's lock is released: a new mount of the volume waits for
	// that lock, so whatever it would take (the CLI's --admin address)
	// must be let go by then.
	BeforeUnlock func()
	// MonitorSlack, if positive, is the timer slack of the Go runtime's
	// monitor thread while the mount runs (timerslack.KeepMonitor): the
	// mount's CPU per request, against how late a P blocked in a system
	// call may be handed on.
	MonitorSlack time.Duration
	// Events, if set, takes the mount's state changes (pbfs events); a
	// node passes its own, which outlives each role. Nil: the mount keeps
	// its own.
	Events *events.Bus
}

// Mount is a running pbfs primary.
type Mount struct {
	cfg        Config
	fs         *capture.FS
	srv        *fs.Server
	store      *journal.Store
	committer  *capture.Committer
	reg        *prometheus.Registry
	cancel     context.CancelFunc
	runDone    chan struct{}
	ctlDone    chan error
	log        *slog.Logger
	unclean    bool
	ahead      *aheadGate // see ErrVolumeAhead; cleared once every backup is resynced
	primary    *primary.Primary
	volumeID   string
	plugins    *host.Supervisor
	lock       *volumeLock // on the backing directory (lock.go)
	overItself bool        // the volume is mounted over its backing directory
	undos      []func()    // what start built, for undo
	aborted    atomic.Bool
	acked      atomic.Uint64 // the newest seq a barrier returned
	// firstAck is closed when the first barrier that covered a write
	// returns (FirstAck).
	firstAck     chan struct{}
	firstAckOnce sync.Once
	startSeq     uint64         // the journal's last seq as the mount started
	bg           sync.WaitGroup // goroutines that use the store (retention)
	rulesSum     []byte         // the local-only rules in force (hints.go)
	// localRules: the same, as a deposed primary's backup reads them
	// (backup.EncodeLocalRules)
	localRules []byte
	skipsSync  bool      // some fsync skips the primary's disk (boot.go)
	frontends  int       // plugins that serve frontend, seen at start (hints.go)
	latency    latencies // of the last barriers, for Status
	timings    timings   // barrier histograms (latency.go)
	findings   *prometheus.CounterVec
}

// Start mounts and starts serving. Close undoes it. Everything that can
// be checked without side effects is checked first (Config.check), so a
// mistake leaves the journal as it was; every later step registers its
// undo, and a failure runs them in reverse.
func Start(cfg Config) (*Mount, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Backing == "" {
		cfg.Backing = cfg.Mountpoint
	}
	ClearStaleMount(cfg.Mountpoint, cfg.Logger)
	if err := cfg.check(); err != nil {
		if !errors.Is(err, ErrVolumeBusy) {
			err = &ConfigError{err}
		}
		return nil, err
	}
	if cfg.SealInterval == 0 {
		cfg.SealInterval = 50 * time.Millisecond
	}
	m := &Mount{cfg: cfg, log: cfg.Logger, reg: prometheus.NewRegistry(), runDone: make(chan struct{}), ahead: newAheadGate(), ctlDone: make(chan error, 1), firstAck: make(chan struct{})}
	if m.cfg.Events == nil {
		m.cfg.Events = events.New()
	}
	m.timings = newTimings(m.reg)
	m.findings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pbfs_plugin_findings_total", Help: "Findings hint plugins reported about the service's settings at start, by plugin and severity.",
	}, []string{"plugin", "severity"})
	m.reg.MustRegister(m.findings)
	if err := m.start(); err != nil {
		m.undo()
		return nil, err
	}
	return m, nil
}

// startRetention trims the journal in the background, when configured.
func (m *Mount) startRetention(ctx context.Context) {
	cfg := m.cfg
	if m.primary != nil {
		if cfg.Retain == 0 {
			cfg.Retain = 10 * time.Minute
		}
		if cfg.RetainMax == 0 {
			cfg.RetainMax = 24 * time.Hour
		}
	}
	if cfg.RetainMax < 0 {
		cfg.RetainMax = 0 // no age limit
	}
	if cfg.Retain <= 0 {
		return // keep everything
	}
	safe := func() uint64 { return m.store.Last().Seq }
	if m.primary != nil {
		safe = m.primary.SafeSeq
	}
	trimmed := prometheus.NewCounter(prometheus.CounterOpts{Name: "pbfs_journal_trimmed_batches_total", Help: "Batches retention deleted."})
	m.reg.MustRegister(trimmed)
	// A pass at least as often as the shorter limit, so neither is
	// overstayed by more than itself (and never by more than 10 s).
	every := min(10*time.Second, cfg.Retain)
	if cfg.RetainMax > 0 {
		every = min(every, cfg.RetainMax)
	}
	r := &journal.Retention{Store: m.store, Window: cfg.Retain, MaxAge: cfg.RetainMax, SafeSeq: safe,
		Every: every, Logger: m.log, Trimmed: func(n int) { trimmed.Add(float64(n)) }}
	m.bg.Add(1)
	go func() { defer m.bg.Done(); r.Run(ctx) }()
}

// volumeID returns the journal's volume id, creating one for a new journal.
func volumeID(st *journal.Store) (string, error) {
	v, err := st.Meta(journal.KeyVolume.Name)
	if err != nil {
		return "", err
	}
	if len(v) > 0 {
		return string(v), nil
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b[:])
	return id, st.SetMeta(journal.KeyVolume.Name, []byte(id))
}

// Done is closed when the mount goes away without Close: unmounted from
// outside (umount, fusermount3 -u; also lazily, while the service's open
// files are still served). Close then seals and ships what it took.
func (m *Mount) Done() <-chan struct{} { return m.srv.Gone() }

// Deposed is closed once a backup has refused this primary for its epoch
// (a newer term began, or the backups fenced this one): no barrier
// returns again. Nil, never closed, without backups.
func (m *Mount) Deposed() <-chan struct{} {
	if m.primary == nil {
		return nil
	}
	return m.primary.Deposed()
}

// Summary reports the mount's state from what it holds in memory, for
// periodic callers (the coordinator, plugins).
func (m *Mount) Summary() control.Status {
	pending, nodes := m.fs.Stats()
	st := control.Status{Role: "primary", Volume: m.cfg.Mountpoint, VolumeID: m.volumeID, Capture: !m.cfg.NoCapture, LastSeq: m.store.Last().Seq,
		Epoch: m.store.Epoch(), PendingBytes: pending, Nodes: nodes, UncleanStart: m.unclean,
		JournalFree: m.store.FreeBytes(), JournalReserve: m.store.ReserveBytes()}
	check := m.store.BatchCheck()
	st.JournalCheck, st.JournalDamaged = check.String(), check.DamagedBatches()
	if m.primary != nil {
		st.Backups, st.Acks = m.primary.Status(), m.primary.AckSummary()
	}
	if m.plugins != nil {
		st.Plugins = m.plugins.Status()
	}
	return st
}

// Status is Summary with what costs reading the disk: the journal's size,
// each lagging backup's lag in bytes and age, barrier percentiles. The
// control socket answers with it (pbfs status).
func (m *Mount) Status() control.Status {
	st := m.Summary()
	st.JournalBytes = m.store.DiskBytes()
	st.BarrierP50, st.BarrierP95, st.BarrierP99 = m.latency.percentiles()
	if m.primary != nil {
		m.primary.AddLag(st.Backups)
	}
	return st
}

// snapshots lets replication take consistent snapshots of the volume.
type snapshots struct {
	*capture.Committer
	fs *capture.FS
}

func (s snapshots) OpenHandle(h *unix.FileHandle) (*os.File, error) { return s.fs.OpenHandle(h) }

// Get returns an encoded batch from the journal.
func (m *Mount) Get(seq uint64) ([]byte, error) { return m.store.Get(seq) }

// Scan streams encoded batches from the journal.
func (m *Mount) Scan(from uint64, fn func(uint64, []byte) error) error { return m.store.Scan(from, fn) }

// Events is the mount's stream of state changes.
func (m *Mount) Events() *events.Bus { return m.cfg.Events }

// Registry returns the mount's metrics registry.
func (m *Mount) Registry() *prometheus.Registry { return m.reg }
