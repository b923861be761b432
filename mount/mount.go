// Package mount assembles a running pbfs primary: it opens the backing
// directory and the journal, mounts the capture filesystem, runs the
// committer and serves the control socket. The CLI and the tests share it.
package mount

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/capture"
	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/fs"
	"github.com/pbfs/pbfs/internal/pathcheck"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/plugins/sdk/host"
	"github.com/pbfs/pbfs/replicate"
)

// ErrJournalInVolume refuses a journal directory inside the volume.
var ErrJournalInVolume = pathcheck.ErrInside

// ErrVolumeAhead fails barriers of a replicating primary whose volume may
// hold changes its journal lacks (it crashed after applying writes it had
// not journaled) while its backups are being resynced to the volume: fed
// from the journal alone they would silently differ.
var ErrVolumeAhead = errors.New("volume may hold changes the journal lacks after a crash: backups need a resync")

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

	// Retain keeps batches every backup holds for this long before
	// trimming them; RetainMax trims any batch older than that (a backup
	// that has not acked it will need a resync). Zero Retain disables
	// trimming; with backups it defaults to 10 minutes and RetainMax to 24
	// hours.
	Retain, RetainMax time.Duration

	// TLS, if set, uses mutual TLS to the backups.
	TLS replicate.TLSFiles

	// Epoch, if above the journal's, raises it durably before anything is
	// shipped: a promoted primary starts a new term this way, and backups
	// then refuse the old primary (fencing).
	Epoch uint64

	// Plugins are started once the mount serves and stopped before it
	// unmounts; PluginLogLevel is the level they log at.
	Plugins        []host.Spec
	PluginLogLevel string
}

// Mount is a running pbfs primary.
type Mount struct {
	cfg       Config
	fs        *capture.FS
	srv       *fs.Server
	store     *journal.Store
	committer *capture.Committer
	reg       *prometheus.Registry
	cancel    context.CancelFunc
	runDone   chan struct{}
	ctlDone   chan error
	log       *slog.Logger
	unclean   bool
	ahead     atomic.Bool // see ErrVolumeAhead; cleared once every backup is resynced
	primary   *replicate.Primary
	volumeID  string
	plugins   *host.Supervisor
}

// Start mounts and starts serving. Close undoes it.
func Start(cfg Config) (*Mount, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Backing == "" {
		cfg.Backing = cfg.Mountpoint
	}
	if cfg.MaxBatchBytes > journal.MaxBodySize/4 {
		return nil, fmt.Errorf("batch size %d: at most %d", cfg.MaxBatchBytes, journal.MaxBodySize/4)
	}
	if cfg.SealInterval <= 0 {
		cfg.SealInterval = 50 * time.Millisecond
	}
	clearStaleMount(cfg.Mountpoint, cfg.Logger)
	if err := os.MkdirAll(cfg.Journal, 0o700); err != nil {
		return nil, fmt.Errorf("create journal directory: %w", err)
	}
	if err := pathcheck.Outside(cfg.Journal, cfg.Backing); err != nil {
		return nil, err
	}
	if cfg.Backing != cfg.Mountpoint {
		if err := pathcheck.Outside(cfg.Journal, cfg.Mountpoint); err != nil {
			return nil, err
		}
	}
	// Open the backing directory before mounting: when the mount covers
	// it, this fd is the only way left to reach it.
	rootFd, err := unix.Open(cfg.Backing, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open backing directory: %w", err)
	}
	m := &Mount{cfg: cfg, log: cfg.Logger, reg: prometheus.NewRegistry(), runDone: make(chan struct{}), ctlDone: make(chan error, 1)}
	// The primary's appends are lazy: Barrier syncs when no backup holds
	// the batch, and after a crash of the machine the unclean marker
	// (synced) has the backups resynced from the volume.
	m.store, err = journal.OpenStore(cfg.Journal, journal.StoreOptions{Logger: cfg.Logger, LazyAppends: true, Reserve: cfg.JournalReserve})
	if err != nil {
		unix.Close(rootFd)
		return nil, err
	}
	if cfg.Epoch > m.store.Epoch() {
		if err := m.store.SetEpoch(cfg.Epoch); err != nil {
			unix.Close(rootFd)
			m.store.Close()
			return nil, err
		}
	} else if cfg.Epoch != 0 && cfg.Epoch < m.store.Epoch() {
		unix.Close(rootFd)
		m.store.Close()
		return nil, fmt.Errorf("epoch %d is below the journal's %d: epochs never go back", cfg.Epoch, m.store.Epoch())
	}
	if m.volumeID, err = volumeID(m.store); err != nil {
		unix.Close(rootFd)
		m.store.Close()
		return nil, err
	}
	unclean, since, err := m.store.MarkOpen()
	if err != nil {
		unix.Close(rootFd)
		m.store.Close()
		return nil, err
	}
	if unclean {
		// The volume may hold changes made after the last sealed batch
		// that the journal never got: copies made from this journal
		// alone can miss them. Backups need a resync from this volume.
		m.unclean = true
		cfg.Logger.Warn("the previous mount of this journal did not shut down cleanly; the volume may hold changes the journal lacks",
			"opened_at_seq", since, "last_seq", m.store.Last().Seq)
		if err := m.store.SetMetaUint("ahead", since+1); err != nil {
			unix.Close(rootFd)
			m.store.Close()
			return nil, err
		}
	}
	if ahead, _ := m.store.MetaUint("ahead"); ahead > 0 && len(cfg.Backups) > 0 {
		m.ahead.Store(true)
		cfg.Logger.Warn("resyncing every backup before replicating: "+ErrVolumeAhead.Error(), "since_seq", ahead)
	}
	ln, err := control.Listen(cfg.Journal)
	if err != nil {
		unix.Close(rootFd)
		m.store.Close()
		return nil, err
	}
	var space func(int64) error
	if !cfg.NoCapture {
		space = m.store.Writable
	}
	m.reg.MustRegister(m.store.SpaceCollectors()...)
	m.fs, err = capture.New(rootFd, capture.Options{
		Capture: !cfg.NoCapture, WriteDiff: cfg.WriteDiff, MaxBatchBytes: cfg.MaxBatchBytes,
		Logger: cfg.Logger, Metrics: capture.NewMetrics(m.reg), Space: space,
	})
	if err != nil {
		unix.Close(rootFd)
		ln.Close()
		m.store.Close()
		return nil, err
	}
	m.committer = capture.NewCommitter(m.fs, m.store, cfg.SealInterval, m.reg, cfg.Logger)
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "pbfs_journal_syncs_total", Help: "Flushes of the journal's lazy appends, by barriers no backup held.",
	}, func() float64 { return float64(m.store.Syncs()) }))
	if len(cfg.Backups) > 0 {
		m.primary, err = replicate.StartPrimary(replicate.PrimaryConfig{Backups: cfg.Backups, Ack: cfg.Ack, Token: cfg.Token,
			VolumeID: m.volumeID, Store: m.store, Registry: m.reg, Logger: cfg.Logger, DegradeAfter: cfg.DegradeAfter, TLS: cfg.TLS,
			Snapshots: snapshots{m.committer, m.fs}, ResyncAll: m.ahead.Load(), AllResynced: m.resynced})
		if err != nil {
			ln.Close()
			m.fs.Close()
			m.store.Close()
			return nil, err
		}
	}
	m.srv, err = fs.Mount(cfg.Mountpoint, m.fs, fs.Options{AllowOther: cfg.AllowOther, Xattrs: !cfg.NoXattrs, Logger: cfg.Logger, Registry: m.reg})
	if err != nil {
		ln.Close()
		m.fs.Close()
		m.store.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.startRetention(ctx)
	go func() {
		m.committer.Run(ctx)
		close(m.runDone)
	}()
	// Plugins start once the mount serves; before the control socket,
	// which reports them.
	m.startPlugins()
	go func() { m.ctlDone <- control.Serve(ctx, ln, m, m.reg, cfg.Logger) }()
	m.log.Info("mounted", "mountpoint", cfg.Mountpoint, "backing", cfg.Backing, "journal", cfg.Journal,
		"capture", !cfg.NoCapture, "last_seq", m.store.Last().Seq, "epoch", m.store.Epoch())
	return m, nil
}

// startRetention trims the journal in the background, when configured.
func (m *Mount) startRetention(ctx context.Context) {
	cfg := m.cfg
	if cfg.Retain == 0 && m.primary != nil {
		cfg.Retain, cfg.RetainMax = 10*time.Minute, 24*time.Hour
	}
	if cfg.Retain <= 0 {
		return
	}
	safe := func() uint64 { return m.store.Last().Seq }
	if m.primary != nil {
		safe = m.primary.SafeSeq
	}
	trimmed := prometheus.NewCounter(prometheus.CounterOpts{Name: "pbfs_journal_trimmed_batches_total", Help: "Batches retention deleted."})
	m.reg.MustRegister(trimmed)
	r := &journal.Retention{Store: m.store, Window: cfg.Retain, MaxAge: cfg.RetainMax, SafeSeq: safe,
		Every: min(10*time.Second, cfg.Retain), Logger: m.log, Trimmed: func(n int) { trimmed.Add(float64(n)) }}
	go r.Run(ctx)
}

// volumeID returns the journal's volume id, creating one for a new journal.
func volumeID(st *journal.Store) (string, error) {
	v, err := st.Meta("volume")
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
	return id, st.SetMeta("volume", []byte(id))
}

// clearStaleMount detaches a dead FUSE mount left at dir by a daemon that
// was killed: its directory answers ENOTCONN and hides the volume.
func clearStaleMount(dir string, log *slog.Logger) {
	// statfs always reaches the daemon (stat may be answered from the
	// kernel's attribute cache).
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != unix.ENOTCONN {
		return
	}
	log.Warn("detaching a dead FUSE mount left by a killed daemon", "dir", dir)
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		log.Error("detach dead mount", "dir", dir, "err", err)
	}
}

// Done is closed when the kernel side of the mount goes away.
func (m *Mount) Done() <-chan struct{} { return m.srv.Done() }

// Barrier seals everything captured so far into the journal and returns
// its seq once that batch, and every batch before it, is durable on the
// ack set. With nothing new it returns the last seq without sealing, and
// without a network round trip once that seq is acked.
func (m *Mount) Barrier(ctx context.Context) (uint64, error) {
	// What the service stored through shared mappings reaches the
	// capture only when the kernel writes it back: make it now.
	if err := m.srv.Flush(ctx); err != nil {
		return 0, fmt.Errorf("barrier: %w", err)
	}
	seq, err := m.committer.Barrier(ctx)
	if err == nil && m.ahead.Load() {
		err = ErrVolumeAhead
	}
	if err != nil {
		return seq, err
	}
	acks := 0
	if m.primary != nil {
		if acks, err = m.primary.Wait(ctx, seq); err != nil {
			return 0, err
		}
	}
	if acks == 0 {
		// No backup holds the batch (none configured, --ack none, or all
		// degraded): a barrier still means durable somewhere, here.
		if err := m.store.Sync(); err != nil {
			return 0, fmt.Errorf("barrier %d: %w", seq, err)
		}
	}
	return seq, nil
}

// Status reports the mount's state.
func (m *Mount) Status() control.Status {
	pending, nodes := m.fs.Stats()
	st := control.Status{Volume: m.cfg.Mountpoint, VolumeID: m.volumeID, Capture: !m.cfg.NoCapture, LastSeq: m.store.Last().Seq,
		Epoch: m.store.Epoch(), PendingBytes: pending, Nodes: nodes, UncleanStart: m.unclean}
	if m.primary != nil {
		st.Backups = m.primary.Status()
	}
	if m.plugins != nil {
		st.Plugins = m.plugins.Status()
	}
	return st
}

// resynced runs once every backup has been resynced after an unclean
// start: the backups hold the volume as it is, lost journal suffix and all.
func (m *Mount) resynced() {
	if !m.ahead.Load() {
		return
	}
	if err := m.store.SetMetaUint("ahead", 0); err != nil {
		m.log.Error("clear the unclean marker", "err", err)
		return
	}
	m.ahead.Store(false)
	m.log.Info("every backup is resynced; replicating")
}

// Resync makes every backup resync now.
func (m *Mount) Resync() error {
	if m.primary == nil {
		return errors.New("resync: this mount has no backups")
	}
	m.primary.Resync()
	return nil
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

// Registry returns the mount's metrics registry.
func (m *Mount) Registry() *prometheus.Registry { return m.reg }

// Close unmounts (lazily if the volume is busy), seals what is left into
// the journal and closes it.
func (m *Mount) Close() error {
	m.stopPlugins()
	err := m.srv.Unmount()
	m.cancel()
	<-m.runDone
	if m.primary != nil {
		// The final batch had its chance to ship while the committer
		// closed; a backup that missed it catches up on the next mount.
		m.primary.Close()
	}
	if held := m.committer.Held(); held > 0 {
		// The journal stays marked open, so the next mount treats the
		// volume as ahead of it and resyncs every backup.
		err = errors.Join(err, fmt.Errorf("unmount: %d captured ops of the last batch never reached the journal: %w", held, ErrNotJournaled))
	} else if err == nil {
		if cerr := m.store.MarkClosed(); cerr != nil {
			err = cerr
		}
	}
	if cerr := <-m.ctlDone; cerr != nil {
		m.log.Warn("control socket", "err", cerr)
	}
	if serr := m.store.Close(); err == nil {
		err = serr
	}
	m.fs.Close()
	m.log.Info("unmounted", "mountpoint", m.cfg.Mountpoint, "last_seq", m.store.Last().Seq)
	return err
}
