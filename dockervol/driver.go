// Package dockervol is pbfs's container volume driver: the volumes that a
// container engine (Docker, or Podman) asks for through the Docker volume
// plugin protocol, each a pbfs mount with its own journal, replicated to
// the backups its options name. The driver keeps them under a state
// directory, answers the engine on a unix socket (protocol.go), mounts a
// volume when its first container starts and, once the last one stops,
// takes a barrier and unmounts it (mounts.go).
package dockervol

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Errors the engine's requests get, for callers that branch.
var (
	ErrNotFound = errors.New("no such volume")
	ErrExists   = errors.New("volume exists with other options")
	ErrInUse    = errors.New("volume is mounted")
)

// Config configures a Driver.
type Config struct {
	// StateDir holds the volumes (record.go).
	StateDir string
	// Exe is the pbfs binary each volume's mount runs.
	Exe string
	// Defaults are the options every volume starts from.
	Defaults Options
	// LogLevel is the mounts' --log-level.
	LogLevel string
	// BarrierTimeout bounds the barrier of a volume's last unmount.
	BarrierTimeout time.Duration
	// StopTimeout bounds a mount's stop after that barrier.
	StopTimeout time.Duration
	// DialTimeout bounds the check, at creation, that a backup answers.
	DialTimeout time.Duration
	Logger      *slog.Logger
}

// Driver owns the volumes of one state directory.
type Driver struct {
	cfg  Config
	log  *slog.Logger
	mu   sync.Mutex // guards vols
	vols map[string]*volume
}

// volume is one volume in memory. op serializes the lifecycle (create,
// mount, unmount, remove); mu guards the fields, for quick reads while an
// operation runs.
type volume struct {
	op      sync.Mutex
	mu      sync.Mutex
	p       paths
	rec     *record
	srv     *server // nil while not mounted
	removed bool
}

// New opens the state directory: it removes what interrupted creations
// and removals left, loads every volume and adopts the mounts a previous
// driver left running (adopt.go).
func New(cfg Config) (*Driver, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "info"
	}
	if cfg.BarrierTimeout == 0 {
		cfg.BarrierTimeout = 30 * time.Second
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 20 * time.Second
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 3 * time.Second
	}
	if _, err := Merge(cfg.Defaults, nil); err != nil {
		return nil, fmt.Errorf("open driver: defaults: %w", err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("open driver: %w", err)
	}
	state, err := filepath.Abs(cfg.StateDir)
	if err == nil {
		state, err = filepath.EvalSymlinks(state)
	}
	if err != nil {
		return nil, fmt.Errorf("open driver: %w", err)
	}
	cfg.StateDir = state
	d := &Driver{cfg: cfg, log: cfg.Logger, vols: map[string]*volume{}}
	if err := d.load(); err != nil {
		return nil, err
	}
	return d, nil
}

// Create makes a volume with opts over the driver's defaults. Creating a
// volume that exists with the same options is no error (the engine may
// ask again); with other options it is ErrExists.
func (d *Driver) Create(name string, opts Options) error {
	if err := checkName(d.cfg.StateDir, name); err != nil {
		return err
	}
	merged, err := Merge(d.cfg.Defaults, opts)
	if err != nil {
		return err
	}
	if v, err := d.lookup(name); err == nil {
		return sameOptions(v, merged)
	}
	if err := d.checkBackups(merged.Backups()); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.vols[name]; ok {
		return sameOptions(v, merged)
	}
	r := &record{Name: name, Options: merged, CreatedAt: time.Now().UTC().Truncate(time.Second)}
	if err := createVolume(d.cfg.StateDir, r); err != nil {
		return err
	}
	d.vols[name] = &volume{p: paths{filepath.Join(d.cfg.StateDir, name)}, rec: r}
	d.log.Info("volume created", "volume", name, "backups", merged.Backups())
	return nil
}

func sameOptions(v *volume, opts Options) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if fmt.Sprint(v.rec.Options) == fmt.Sprint(opts) {
		return nil
	}
	return fmt.Errorf("%w: %s has %v: remove it first, or pick another name", ErrExists, v.rec.Name, v.rec.Options)
}

// Remove removes an unmounted volume: its files and its journal (the
// backups keep their copies). A mounted one is ErrInUse.
func (d *Driver) Remove(name string) error {
	v, err := d.lookup(name)
	if err != nil {
		return err
	}
	v.op.Lock()
	defer v.op.Unlock()
	v.mu.Lock()
	n, srv := len(v.rec.Mounts), v.srv
	v.mu.Unlock()
	if n > 0 || srv != nil || mountedAt(v.p.data()) {
		return fmt.Errorf("remove %s: %w by %d containers: stop them first", name, ErrInUse, n)
	}
	if err := removeVolume(d.cfg.StateDir, name); err != nil {
		return err
	}
	v.mu.Lock()
	v.removed = true
	v.mu.Unlock()
	d.mu.Lock()
	delete(d.vols, name)
	d.mu.Unlock()
	d.log.Info("volume removed", "volume", name)
	return nil
}

// Path returns where the volume is mounted, "" while it is not.
func (d *Driver) Path(name string) (string, error) {
	v, err := d.lookup(name)
	if err != nil {
		return "", err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.srv == nil {
		return "", nil
	}
	return v.p.data(), nil
}

// Names lists the volumes.
func (d *Driver) Names() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for n := range d.vols {
		out = append(out, n)
	}
	return out
}

func (d *Driver) lookup(name string) (*volume, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.vols[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrNotFound, name)
	}
	return v, nil
}
