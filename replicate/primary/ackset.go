package primary

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/wire"
)

// ParseAck reads an ack policy for n backups: "all", "majority" (a
// majority of the group, primary included), "none" or a number.
func ParseAck(policy string, n int) (int, error) {
	switch policy {
	case "", "all":
		return n, nil
	case "majority":
		return (n + 1) / 2, nil
	case "none":
		return 0, nil
	}
	k, err := strconv.Atoi(policy)
	if err != nil || k < 0 || k > n {
		return 0, fmt.Errorf("ack policy %q: want all, majority, none or a number from 0 to %d", policy, n)
	}
	return k, nil
}

// Primary ships the journal to every backup and answers whether a seq is
// durable on the ack set.
type Primary struct {
	shippers []*Shipper
	policy   string
	need     int
	store    *journal.Store
	log      *slog.Logger
	// degradeAfter, when set, drops a backup from the ack set once it has
	// been behind for that long (see watch); zero blocks barriers instead.
	degradeAfter time.Duration
	memory       bool // AckLevel memory: received acks count
	m            *shipMetrics
	cancel       context.CancelFunc
	ctx          context.Context
	wg           sync.WaitGroup
	cfg          Config
	smu          sync.Mutex // guards shippers once started (members.go)
	// resyncLeft counts the backups still to be resynced for ResyncAll
	// (0: none, or all done; members.go): -1 before the first is added.
	resyncLeft int

	mu      sync.Mutex
	changed chan struct{}
	// ackedMax is the newest seq a barrier returned for, and joinGen
	// counts joins: a backup joins the ack set only holding ackedMax, and
	// a barrier that saw the set before a join counts again (join).
	ackedMax uint64
	joinGen  uint64
	// deposed is closed once a backup has refused this primary for a
	// higher epoch (depose).
	deposed   chan struct{}
	deposeOne sync.Once
}

// Config configures the primary side.
type Config struct {
	Backups  []string
	Ack      string
	Token    string
	VolumeID string
	Store    *journal.Store
	Registry prometheus.Registerer
	Logger   *slog.Logger
	// Events, if set, takes the primary's state changes (its backups up
	// and down, resyncs, degradations).
	Events *events.Bus
	// DegradeAfter: see Primary.degradeAfter.
	DegradeAfter time.Duration
	// MinBackups is the fewest backups that must hold a batch before its
	// barrier returns, however few are connected or known: a primary of
	// `pbfs node` elected while the other members were down acknowledged
	// on its own disk, and a member elected after its loss lacked what it
	// had acknowledged. 0: the ack policy alone decides.
	MinBackups int
	// Dynamic: backups are added while the primary runs (AddBackup), so a
	// numeric ack policy is not held against the backups given at the
	// start; while fewer are in the ack set, all of them must ack (as
	// when the degrade policy leaves fewer), and MinBackups sets a floor.
	Dynamic bool
	// AckLevel is what a backup's ack means: "disk" (the default: durable
	// in its journal) or "memory" (received and checksummed; DRBD's
	// protocol B).
	AckLevel string
	// TLS, if set, uses mutual TLS to every backup.
	TLS wire.TLSFiles
	// Snapshots, if set, lets the primary resync backups that need it.
	Snapshots Snapshotter
	// ResyncAll resyncs every backup first, and AllResynced is called once
	// they all have been.
	ResyncAll   bool
	AllResynced func()
}

// Check refuses a configuration Start would: an ack policy the
// backups cannot meet, a malformed backup address, no token, TLS files
// that do not load. It touches nothing.
func (cfg *Config) Check() error {
	n := len(cfg.Backups)
	if cfg.Dynamic {
		n = maxMinBackups
	}
	if _, err := ParseAck(cfg.Ack, n); err != nil {
		return err
	}
	if cfg.MinBackups < 0 || cfg.MinBackups > maxMinBackups {
		return fmt.Errorf("min-backups %d: want a number from 0 to %d", cfg.MinBackups, maxMinBackups)
	}
	if cfg.MinBackups > 0 && cfg.Ack == "none" {
		return fmt.Errorf("min-backups %d contradicts ack policy none", cfg.MinBackups)
	}
	switch cfg.AckLevel {
	case "", AckDisk, AckMemory:
	default:
		return fmt.Errorf("ack level %q: want disk or memory", cfg.AckLevel)
	}
	seen := map[string]bool{}
	for _, addr := range cfg.Backups {
		_, port, err := net.SplitHostPort(addr)
		if err != nil || port == "" {
			return fmt.Errorf("backup address %q: want host:port", addr)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return fmt.Errorf("backup address %q: port %q is not a number from 1 to 65535", addr, port)
		}
		if seen[addr] {
			return fmt.Errorf("backup address %q given twice", addr)
		}
		seen[addr] = true
	}
	if err := sameBackupTwice(cfg.Backups); err != nil {
		return err
	}
	if len(cfg.Backups) > 0 && cfg.Token == "" {
		return wire.ErrNoToken
	}
	return cfg.TLS.Check()
}

// Start starts a shipper per backup.
func Start(cfg Config) (*Primary, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	need, err := ParseAck(cfg.Ack, len(cfg.Backups))
	if err != nil { // Dynamic, and fewer backups than the policy names yet
		need = len(cfg.Backups)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Primary{need: need, policy: cfg.Ack, store: cfg.Store, log: cfg.Logger, degradeAfter: cfg.DegradeAfter, memory: cfg.AckLevel == AckMemory,
		m: newShipMetrics(cfg.Registry), changed: make(chan struct{}), deposed: make(chan struct{}), cfg: cfg}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.ctx = cancel, ctx
	for _, addr := range cfg.Backups {
		s, err := newShipper(addr, cfg.Token, cfg.TLS, cfg.VolumeID, cfg.Store, cfg.Snapshots, p.m, p.notify, cfg.Logger)
		if s != nil {
			s.memory, s.onDeposed, s.onJoin, s.ev = p.memory, p.depose, p.join, cfg.Events
		}
		if err != nil {
			cancel()
			return nil, err
		}
		p.shippers = append(p.shippers, s)
	}
	if cfg.ResyncAll {
		p.resyncLeft = -1 // none resynced yet
		for _, s := range p.shippers {
			p.mustResync(s)
		}
	}
	p.announce()
	if !cfg.Dynamic {
		// A fixed list of backups (pbfs mount) is told the same policy
		// at every start, as its flags say: one that is down now holds
		// it already, and is not taken to hold {1 of 1} (quorum), which
		// would hold every barrier until it was back, --degrade-after
		// or not.
		for _, s := range p.shippers {
			s.confirmed.Store(s.policy.Load())
		}
	}
	for _, s := range p.shippers {
		p.startShipper(s)
	}
	if p.degradeAfter > 0 {
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.watch(ctx) }()
	}
	cfg.Logger.Info("replicating", "backups", strings.Join(cfg.Backups, ","), "ack", cfg.Ack, "need", need)
	return p, nil
}

func (p *Primary) notify() {
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// depose closes Deposed, once.
func (p *Primary) depose() { p.deposeOne.Do(func() { close(p.deposed) }) }

// Deposed is closed once a backup has refused this primary because it has
// seen a higher epoch: from then on no barrier can succeed, and whatever
// waits for one (the resync of a volume ahead of its journal) can give
// up with ErrDeposed.
func (p *Primary) Deposed() <-chan struct{} { return p.deposed }

// Wait returns once seq is durable on the ack set, with how many backups
// hold it (0 when the policy needs none), or fails when this primary is
// deposed or ctx ends.
func (p *Primary) Wait(ctx context.Context, seq uint64) (int, error) {
	start := time.Now()
	for {
		p.mu.Lock()
		ch, gen := p.changed, p.joinGen
		p.mu.Unlock()
		have, degraded := 0, 0
		shippers := p.list()
		q := electable{n: len(shippers)}
		for _, s := range shippers {
			if s.deposed.Load() {
				return 0, ErrDeposed
			}
			if s.joining.Load() && s.acked.Load() >= seq {
				p.join(s, seq)
			}
			holds := s.counts() && s.holds(seq, p.memory)
			q.add(s, holds)
			if s.degraded.Load() || s.joining.Load() {
				degraded++
			} else if holds {
				have++
			}
		}
		need := p.needOf(len(shippers) - degraded)
		if need == 0 && degraded > 0 && p.needOf(len(shippers)) > 0 {
			// Every backup is out of the ack set, joining (the degrade
			// policy keeps one otherwise): the first to catch up joins
			// it. Acknowledged on the primary alone, the barrier was lost
			// with it, as a degraded one was.
			need = 1
		}
		enough := have >= need && (need == 0 || q.safe())
		if enough && !p.acknowledged(gen, seq) {
			continue // a backup joined meanwhile: count it
		}
		if enough {
			p.m.barriers.Observe(time.Since(start).Seconds())
			return have, nil
		}
		select {
		case <-ctx.Done():
			return 0, p.missing(seq, have, need, shippers, ctx.Err())
		case <-ch:
		}
	}
}

// missing explains, in one line, a barrier that gave up waiting: how many
// backups hold seq, how many it needed, and what state each of the
// others is in.
func (p *Primary) missing(seq uint64, have, need int, shippers []*Shipper, cause error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "seq %d is on %d of %d backups, %d needed (--ack %s", seq, have, len(shippers), need, p.policy)
	if p.cfg.MinBackups > 0 {
		fmt.Fprintf(&b, ", --min-backups %d", p.cfg.MinBackups)
	}
	b.WriteString(")")
	if have >= need {
		b.WriteString(", but a backup lacking it holds an ack policy by which it could be elected without it, until it is told the current one")
	}
	for _, s := range shippers {
		if s.holds(seq, p.memory) && s.counts() && !s.degraded.Load() && !s.joining.Load() {
			continue
		}
		fmt.Fprintf(&b, "; %s: %s", s.addr, s.describe(seq))
	}
	return fmt.Errorf("%s: %w", b.String(), cause)
}

// Ack levels: what a backup's ack means (Config.AckLevel).
const (
	AckDisk   = "disk"   // durable in the backup's journal (synced)
	AckMemory = "memory" // received and checksummed, in its memory
)

// maxMinBackups bounds MinBackups, and a dynamic primary's numeric ack
// policy: more backups than anyone runs.
const maxMinBackups = 64

// needOf is how many acks a barrier needs when n backups are in the ack
// set: what the ack policy asks of n, and never fewer than MinBackups
// (more than n: the barrier waits for backups to join).
func (p *Primary) needOf(n int) int {
	k, err := ParseAck(p.policy, n)
	if err != nil { // a number larger than the backups left
		k = n
	}
	return max(k, p.cfg.MinBackups)
}

// Resync makes the backups at addrs (none: every backup) resync at once
// (an operator suspects a backup's volume was changed behind its back, or
// verify found it differs: the checksums find what). An address that is
// not one of its backups is refused, and nothing starts.
func (p *Primary) Resync(addrs ...string) error {
	shippers := p.list()
	want := map[string]bool{}
	for _, a := range addrs {
		want[a] = true
	}
	for _, s := range shippers {
		delete(want, s.addr)
	}
	for a := range want {
		return fmt.Errorf("resync %s: %w", a, ErrUnknownBackup)
	}
	for _, s := range shippers {
		if len(addrs) > 0 && !slices.Contains(addrs, s.addr) {
			continue
		}
		s.force.Store(true)
		if c := s.cancel.Load(); c != nil {
			(*c)()
		}
	}
	return nil
}

// ErrUnknownBackup: an address that is none of this primary's backups.
var ErrUnknownBackup = errors.New("not a backup of this primary")

// SafeSeq is the newest seq every backup holds durably: what the journal
// may trim.
func (p *Primary) SafeSeq() uint64 {
	safe := p.store.Last().Seq
	for _, s := range p.list() {
		safe = min(safe, s.acked.Load())
	}
	return safe
}

// Close stops shipping.
func (p *Primary) Close() {
	p.cancel()
	p.wg.Wait()
}
