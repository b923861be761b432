package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/procs"
	"github.com/pbfs/pbfs/internal/timerslack"
	"github.com/pbfs/pbfs/mount"
	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/primary"
)

// Config describes a node.
type Config struct {
	Endpoints []string      // etcd client URLs or host:port
	Cluster   string        // the key prefix is /pbfs/CLUSTER
	Name      string        // unique in the cluster
	Listen    string        // where the backup role listens
	Advertise string        // where the others reach it (default Listen)
	TTL       time.Duration // the primary's lease (default 3 s; etcd allows no less than about 1.5 s)
	// Mount is the primary role's configuration (the volume, the journal,
	// the ack policy, plugins); Backups, Epoch and Lease are filled in.
	Mount mount.Config
	// Backup is the backup role's (token, TLS, reserve, retention); the
	// volume and journal are Mount's.
	Backup backup.Config
	// Proxy is the frontend's listen address (the http-proxy plugin's), if
	// any: while a backup, the node forwards it to the primary's
	// (forward.go). ProxyAdvertise is where the others reach it (default:
	// Advertise's host with Proxy's port).
	Proxy, ProxyAdvertise string
	// OnPromote runs (sh -c) once this node serves as the primary; OnDemote
	// runs before it stops serving as one. Both see PBFS_NODE, PBFS_ROLE,
	// PBFS_EPOCH and PBFS_VOLUME.
	OnPromote, OnDemote string
	// BackupTimerSlack is the process's timer slack while it serves as a
	// backup (internal/timerslack; 0: the kernel's default). The primary
	// role runs with the kernel's default.
	BackupTimerSlack time.Duration
	// BackupProcs is how many threads run the process's Go code while it
	// serves as a backup (internal/procs; 0: never changed). The primary
	// role runs with Go's default.
	BackupProcs int
	// BackupCPUs, when not empty, are the only CPUs the process runs on
	// while it serves as a backup (internal/procs.Pin). The primary role
	// runs where the process ran before.
	BackupCPUs unix.CPUSet
	Logger     *slog.Logger
}

// DefaultTTL is the primary's lease unless configured: long enough to
// ride out etcd electing a new leader (about a second with etcd's
// defaults) without a failover, short enough to fail over in seconds.
const DefaultTTL = 3 * time.Second

// publishEvery is how often a node republishes its member record; the
// election waits a few of these for every node to report after the
// primary's lease lapsed.
const publishEvery = 100 * time.Millisecond

// Node is a running pbfs node.
type Node struct {
	cfg Config
	cli *clientv3.Client
	k   keys
	log *slog.Logger

	memberLease clientv3.LeaseID
	// front is the frontend address's listening socket, for the node's
	// whole life: its forwarder serves it while a backup, its plugin
	// while the primary (forward.go).
	front *os.File
	ev    *events.Bus // state changes, across roles (pbfs events)

	won       *won // the term this node won, for servePrimary
	term      Term // its record, once recorded (guarded by mu)
	firstTerm bool // no term was decided before this node's backup role began
	// slackLogged: a failure to set the timer slack was logged (Run's
	// goroutine only).
	slackLogged bool
	pinLogged   bool // the same for pinning to --cpus

	mu        sync.Mutex
	mounted   *mount.Mount // while primary
	backup    *backup.Backup
	backupReg *prometheus.Registry // the backup's metrics, while backup
	m         *nodeMetrics         // the node's own
	role      string
	refused   string // why the last election attempt did not take the term

	// noted is when this node last renewed its roster entry (unix ns),
	// notedRole the role it noted (roster.go).
	noted     atomic.Int64
	notedRole atomic.Value
}

func (cfg *Config) defaults() error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < 1500*time.Millisecond {
		return fmt.Errorf("lease TTL %v: etcd grants no lease under 1.5 s", cfg.TTL)
	}
	if cfg.Advertise == "" {
		cfg.Advertise = cfg.Listen
	}
	if cfg.Proxy != "" && cfg.ProxyAdvertise == "" {
		host, _, err1 := net.SplitHostPort(cfg.Advertise)
		_, port, err2 := net.SplitHostPort(cfg.Proxy)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("frontend address %q or advertise address %q: want host:port", cfg.Proxy, cfg.Advertise)
		}
		cfg.ProxyAdvertise = net.JoinHostPort(host, port)
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "default"
	}
	if cfg.Name == "" || strings.ContainsAny(cfg.Name, "/ ") {
		return fmt.Errorf("node name %q: want a name without / or spaces", cfg.Name)
	}
	switch cfg.Mount.Ack {
	case "", "all", "majority", "none":
	default:
		return fmt.Errorf("ack policy %q: a node takes all, majority or none (the backups are the members etcd lists)", cfg.Mount.Ack)
	}
	return nil
}

// Run serves as a backup or as the primary, as the cluster decides, until
// ctx ends.
func Run(ctx context.Context, cfg Config) error {
	n, err := Open(cfg)
	if err != nil {
		return err
	}
	defer n.Close()
	return n.Run(ctx)
}

// Open connects to etcd.
func Open(cfg Config) (*Node, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	cli, err := dial(cfg.Endpoints)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, cli: cli, k: keys{"/pbfs/" + cfg.Cluster}, log: cfg.Logger.With("node", cfg.Name), m: newNodeMetrics(), ev: events.New()}
	if cfg.Proxy != "" {
		if n.front, err = listenFront(cfg.Proxy); err != nil {
			cli.Close()
			return nil, fmt.Errorf("listen on the frontend address %s: %w", cfg.Proxy, err)
		}
	}
	return n, nil
}

// Close disconnects from etcd and stops listening on the frontend address.
func (n *Node) Close() error {
	if n.front != nil {
		n.front.Close()
	}
	return n.cli.Close()
}

// Run alternates the backup and primary roles until ctx ends. The copy
// is mounted nosuid,nodev for as long as the node runs (apply.GuardCopy):
// as a backup it holds whatever a primary sent, and the primary's FUSE
// mount goes over it.
func (n *Node) Run(ctx context.Context) error {
	// A primary of this node killed before left its mount behind.
	mount.ClearStaleMount(n.cfg.Mount.Mountpoint, n.log)
	guard, err := apply.GuardCopy(n.volume())
	if err != nil {
		return fmt.Errorf("node: %w: run it as root, or put the volume on a file system mounted nosuid,nodev", err)
	}
	defer func() {
		if err := guard.Release(); err != nil {
			n.log.Warn("copy guard left mounted", "err", err)
		}
	}()
	n.log.Info("the volume is mounted nosuid,nodev while the node runs", "volume", n.volume(), "guard", guard.How)
	go n.keepMember(ctx)
	for ctx.Err() == nil {
		n.schedule(true)
		won, err := n.serveBackup(ctx)
		if err != nil {
			n.log.Error("backup role failed; retrying", "err", err)
			if !sleep(ctx, time.Second) {
				break
			}
			continue
		}
		if !won {
			continue
		}
		n.schedule(false)
		if err := n.servePrimary(ctx); errors.Is(err, ErrLeaseLost) || errors.Is(err, primary.ErrDeposed) {
			n.log.Info("primary role ended; rejoining as a backup") // said why above
		} else if err != nil {
			n.log.Error("primary role ended", "err", err)
		}
	}
	return nil
}

// schedule sets the process's CPUs, timer slack and Go procs for the
// role about to start (a backup's, or a primary's defaults); a failure
// costs only CPU, and is logged once.
func (n *Node) schedule(backup bool) {
	if n.cfg.BackupCPUs.Count() > 0 {
		// Before the procs: Go's default follows the CPUs the process may use.
		if !backup {
			if err := procs.Unpin(); err != nil {
				n.log.Warn("CPU affinity from before --cpus not restored", "err", err)
			}
		} else if err := procs.Pin(n.cfg.BackupCPUs); err != nil && !n.pinLogged {
			n.pinLogged = true
			n.log.Warn("CPU affinity not set", "err", err)
		}
		if n.cfg.BackupProcs <= 0 {
			procs.Set(0) // the default for the CPUs it has now, not in a second
		}
	}
	if n.cfg.BackupProcs > 0 {
		p := 0
		if backup {
			p = n.cfg.BackupProcs
		}
		n.log.Debug("go procs set", "procs", procs.Set(p), "backup", backup)
	}
	if n.cfg.BackupTimerSlack <= 0 {
		return // never changed
	}
	d := time.Duration(0)
	if backup {
		d = n.cfg.BackupTimerSlack
	}
	if err := timerslack.Set(d); err != nil && !n.slackLogged {
		n.slackLogged = true
		n.log.Info("timer slack left at the kernel's default", "err", err)
	}
}

// Abort forces a primary's stop that waits for the service (a second
// signal).
func (n *Node) Abort() {
	n.mu.Lock()
	m := n.mounted
	n.mu.Unlock()
	if m != nil {
		m.Abort()
	}
}

func (n *Node) setRole(role string, m *mount.Mount, b *backup.Backup) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if role != n.role {
		n.ev.Emit(events.KindRole, "role", orNone(role), "node", n.cfg.Name)
	}
	n.role, n.mounted, n.backup = role, m, b
}

func orNone(role string) string {
	if role == "" {
		return "none"
	}
	return role
}

// Events is the node's stream of state changes, across its roles.
func (n *Node) Events() *events.Bus { return n.ev }

// Gather reports the node's own metrics (pbfs_node_*) and those of its
// current role (a Prometheus Gatherer, for the admin listener): the
// mount's while primary, the backup's while backup.
func (n *Node) Gather() ([]*dto.MetricFamily, error) {
	n.mu.Lock()
	m, b, reg := n.mounted, n.backup, n.backupReg
	n.mu.Unlock()
	role := prometheus.Gatherers{n.m.reg}
	switch {
	case m != nil:
		role = append(role, m.Registry())
	case b != nil && reg != nil:
		role = append(role, reg)
	}
	return role.Gather()
}

// volume is the directory the volume lives in.
func (n *Node) volume() string {
	if n.cfg.Mount.Backing != "" {
		return n.cfg.Mount.Backing
	}
	return n.cfg.Mount.Mountpoint
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
