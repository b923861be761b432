package mount

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/capture"
	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/fs"
	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/openfiles"
	"github.com/pbfs/pbfs/internal/pathcheck"
	"github.com/pbfs/pbfs/internal/timerslack"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/primary"
)

// monitorCheck is how often the keeper of the monitor thread's timer slack
// puts back threads that inherited it.
const monitorCheck = time.Second

// start builds the mount step by step; each step that leaves something
// behind registers its undo (onUndo) first. The journal is marked open
// only just before the mount goes live, and marked closed again if that
// fails: a start that fails leaves no trace of an unclean stop.
func (m *Mount) start() error {
	cfg := m.cfg
	// Before anything is created: a user who cannot mount at all gets
	// told so, and no journal.
	if err := fs.CheckDevice(); err != nil {
		return err
	}
	ln, rootFd, err := m.openJournal()
	if err != nil {
		return err
	}
	if err := m.openCapture(rootFd); err != nil {
		return err
	}
	if err := m.markOpen(rootFd); err != nil {
		return err
	}
	if len(cfg.Backups) > 0 || cfg.Dynamic {
		m.primary, err = primary.Start(m.primaryConfig())
		if err != nil {
			return err
		}
		m.onUndo(m.primary.Close)
	}
	m.warnOpenFiles()
	m.overItself = source(cfg.Backing) == source(cfg.Mountpoint)
	m.srv, err = fs.Mount(cfg.Mountpoint, m.fs, fs.Options{AllowOther: cfg.AllowOther, Xattrs: !cfg.NoXattrs, Logger: cfg.Logger, Registry: m.reg,
		Barrier: m.fsyncBarrier, Source: source(cfg.Backing)})
	if err != nil {
		return err
	}
	m.goLive(ln)
	return nil
}

// openJournal locks the volume, listens on the control socket, opens the
// backing directory and the journal, and starts the term: what the mount
// holds before it captures anything. It returns the control socket and
// the backing directory's descriptor.
func (m *Mount) openJournal() (net.Listener, int, error) {
	cfg := m.cfg
	// First: whatever a stopping mount of this volume still holds (its
	// journal, its control socket) it has let go once it lets go of this.
	lock, err := lockVolume(cfg.Backing, m.log)
	if err != nil {
		return nil, -1, err
	}
	m.lock = lock
	m.onUndo(lock.release)
	if err := os.MkdirAll(cfg.Journal, 0o700); err != nil {
		return nil, -1, fmt.Errorf("create journal directory: %w", err)
	}
	ln, err := control.Listen(cfg.Journal)
	if err != nil {
		return nil, -1, err
	}
	m.onUndo(func() { ln.Close() })
	// Open the backing directory before mounting: when the mount covers
	// it, this fd is the only way left to reach it.
	rootFd, err := openVolume(cfg.Backing)
	if err != nil {
		return nil, -1, err
	}
	m.onUndo(func() {
		if m.fs == nil { // capture.New takes it over
			unix.Close(rootFd)
		}
	})
	// The primary's appends are lazy: Barrier syncs when no backup holds
	// the batch, and after a crash of the machine the unclean marker
	// (synced) has the backups resynced from the volume.
	m.store, err = journal.OpenStore(cfg.Journal, journal.StoreOptions{Logger: cfg.Logger, LazyAppends: true, Reserve: cfg.JournalReserve})
	if err != nil {
		return nil, -1, err
	}
	m.onUndo(func() { m.store.Close() })
	m.startSeq = m.store.Last().Seq
	if err := m.openTerm(); err != nil {
		return nil, -1, err
	}
	return ln, rootFd, nil
}

// openCapture loads the hint plugins' rules and sets up the capture core
// over the backing directory, and the committer that seals its batches.
func (m *Mount) openCapture(rootFd int) error {
	cfg := m.cfg
	var space func(int64) error
	if !cfg.NoCapture {
		space = m.store.Writable
	}
	rules, err := m.loadHints(context.Background())
	if err != nil {
		return err
	}
	m.rulesSum = localRulesSum(rules)
	m.localRules = backup.EncodeLocalRules(rules)
	m.skipsSync = skipsLocalSync(rules, cfg.Fsync)
	if usesPolicy(rules, cfg.Fsync, sdk.FsyncDeferred) && m.frontends == 0 {
		m.log.Warn("fsync policy deferred with no frontend plugin: a deferred fsync returns at once and syncs nothing, so a commit a client is told of is durable nowhere until a later barrier covers it; run the clients through the http-proxy plugin, or use the replicated policy")
	}
	m.reg.MustRegister(m.store.SpaceCollectors()...)
	m.reg.MustRegister(m.store.CheckCollectors()...)
	m.fs, err = capture.New(rootFd, capture.Options{
		Capture: !cfg.NoCapture, WriteDiff: cfg.WriteDiff, MaxBatchBytes: cfg.MaxBatchBytes,
		Logger: cfg.Logger, Metrics: capture.NewMetrics(m.reg), Space: space, Classify: classifier(rules, cfg.Fsync),
	})
	if err != nil {
		return err
	}
	m.onUndo(func() { m.fs.Close() })
	m.committer = capture.NewCommitter(m.fs, m.store, cfg.SealInterval, m.reg, cfg.Logger)
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "pbfs_journal_syncs_total", Help: "Flushes of the journal's lazy appends, by barriers no backup held.",
	}, func() float64 { return float64(m.store.Syncs()) }))
	return nil
}

// goLive starts what runs while the mount serves: retention, the check of
// the journal's older segments, the committer, the plugins and the control
// socket. Nothing here fails.
func (m *Mount) goLive(ln net.Listener) {
	cfg := m.cfg
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.startRetention(ctx)
	m.bg.Add(1)
	go func() { defer m.bg.Done(); m.store.CheckBatches(ctx) }() // the older segments (journal/check.go)
	m.bg.Add(1)
	go m.keepAcked(ctx)
	if cfg.MonitorSlack > 0 {
		m.bg.Add(1)
		go func() {
			defer m.bg.Done()
			timerslack.KeepMonitor(ctx, cfg.MonitorSlack, monitorCheck, m.log)
		}()
	}
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
	cfg.Events.Emit(events.KindRole, "role", "primary", "epoch", m.store.Epoch(), "last_seq", m.store.Last().Seq, "volume", cfg.Mountpoint)
}

// warnOpenFiles names the processes that hold files open in the volume's
// directory (or work in it) as the mount starts: their descriptors reach
// the directory beneath the mount, so what they write through them
// bypasses pbfs, reaches no backup, and is in the fingerprint of the next
// clean stop too. Only pbfs verify would find it. A service started before
// pbfs, or a shell left in the directory, does that.
func (m *Mount) warnOpenFiles() {
	dir := m.cfg.Backing
	if dir == "" {
		dir = m.cfg.Mountpoint
	}
	if r, err := pathcheck.Resolve(dir); err == nil {
		dir = r
	}
	hs, err := openfiles.Under(dir, 10)
	if err != nil || len(hs) == 0 {
		return
	}
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.String()
	}
	m.log.Error("processes hold files open in the volume's directory: what they write through those descriptors bypasses pbfs and never reaches the backups; restart them once pbfs is mounted (pbfs verify finds what differs, --repair mends it)",
		"holders", strings.Join(names, "; "))
}

// source is what the mount table names as the mount's source: the
// backing directory, resolved.
func source(backing string) string {
	if r, err := pathcheck.Resolve(backing); err == nil {
		return r
	}
	return backing
}

// onUndo registers f to run if the start fails.
func (m *Mount) onUndo(f func()) { m.undos = append(m.undos, f) }

// undo runs the registered undos, last first.
func (m *Mount) undo() {
	for i := len(m.undos) - 1; i >= 0; i-- {
		m.undos[i]()
	}
	m.undos = nil
}

// openTerm applies --epoch and reads (or makes) the volume id.
func (m *Mount) openTerm() error {
	cfg := m.cfg
	if cfg.Epoch > m.store.Epoch() {
		if err := m.store.SetEpoch(cfg.Epoch); err != nil {
			return err
		}
	} else if cfg.Epoch != 0 && cfg.Epoch < m.store.Epoch() {
		return fmt.Errorf("epoch %d is below the journal's %d: epochs never go back", cfg.Epoch, m.store.Epoch())
	}
	var err error
	m.volumeID, err = volumeID(m.store)
	return err
}

// markOpen records that a mount uses the journal, noting whether the last
// one stopped uncleanly; undone (marked closed again) if the start fails
// later, since nothing was captured yet.
func (m *Mount) markOpen(rootFd int) error {
	// A volume changed while unmounted is ahead of its journal, as after
	// a crash (offline.go); compared before the journal is marked open.
	changed := false
	if !m.cfg.NoCapture && !m.cfg.Promoted {
		var err error
		if changed, err = m.checkOffline(rootFd); err != nil {
			return err
		}
	}
	unclean, since, err := m.store.MarkOpen()
	if err != nil {
		return err
	}
	// A backup opening this journal later (a deposed primary rejoining)
	// must know its volume needs a resync first.
	if err := m.store.SetMeta(journal.KeyRole.Name, []byte(journal.RolePrimary)); err != nil {
		return err
	}
	// And which of its paths stay home: a targeted resync of it removes
	// them, as a full one removes what the new primary does not list.
	if err := m.store.SetMeta(backup.LocalRulesKey, m.localRules); err != nil {
		return err
	}
	m.onUndo(func() {
		if !unclean {
			m.store.MarkClosed()
		}
	})
	if err := m.checkBoot(unclean, m.skipsSync); err != nil {
		return err
	}
	// A log that lost batches since its last clean close: the backups may
	// hold batches it no longer has, under seqs it will number anew, and
	// only a resync from the volume is sure.
	lost := m.store.LostFrom()
	switch {
	case unclean:
		// The volume may hold changes made after the last sealed batch
		// that the journal never got: copies made from this journal
		// alone can miss them. Backups need a resync from this volume.
		m.unclean = true
		m.log.Warn("the previous mount of this journal did not shut down cleanly; the volume may hold changes the journal lacks",
			"opened_at_seq", since, "last_seq", m.store.Last().Seq)
	case changed:
		since = m.store.Last().Seq
		m.log.Warn("the volume changed while pbfs was not mounted (or its last clean stop left no fingerprint, or the local-only rules changed); the journal lacks those changes",
			"last_seq", since)
	case lost > 0:
		since = m.store.Last().Seq
		m.log.Warn("the journal lost batches since its last clean close; backups are resynced from the volume", "lost_from", lost, "last_seq", since)
	}
	if unclean || changed || lost > 0 {
		if err := m.store.SetMetaUint(journal.KeyAhead.Name, since+1); err != nil {
			return err
		}
	}
	if ahead, _ := m.store.MetaUint(journal.KeyAhead.Name); ahead > 0 && (len(m.cfg.Backups) > 0 || m.cfg.Dynamic) {
		m.ahead.set()
		m.log.Warn("resyncing every backup before replicating: "+ErrVolumeAhead.Error(), "since_seq", ahead)
	}
	return nil
}

// primaryConfig is the replication side of the configuration.
func (m *Mount) primaryConfig() primary.Config {
	cfg := m.cfg
	return primary.Config{Backups: cfg.Backups, Ack: cfg.Ack, AckLevel: cfg.AckLevel, Token: cfg.Token, MinBackups: cfg.MinBackups, Dynamic: cfg.Dynamic,
		VolumeID: m.volumeID, Store: m.store, Registry: m.reg, Logger: cfg.Logger, DegradeAfter: cfg.DegradeAfter, TLS: cfg.TLS,
		Snapshots: snapshots{m.committer, m.fs}, ResyncAll: m.ahead.raised(), AllResynced: m.resynced, Events: cfg.Events}
}
