// Package replica runs a backup: a backup.Backup receiving a primary's
// batches on its listener, with the control socket that answers `pbfs
// status` and `pbfs journal` on its journal, assembled in stages with one
// tolerant Close, as package mount runs a primary. `pbfs backup` and a
// `pbfs node` serving as a backup both run one.
package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/events"
	"github.com/pbfs/pbfs/internal/health"
	"github.com/pbfs/pbfs/replicate/backup"
)

// Config is what a replica runs with.
type Config struct {
	// Backup configures the receiving side; its Logger defaults to
	// Logger, its Events to a new bus.
	Backup backup.Config
	// Registry gets the backup's metrics, and the control socket serves
	// it at /metrics; nil makes a new one.
	Registry *prometheus.Registry
	// Listener is where primaries connect, bound by the caller before
	// Start (pbfs backup binds it before the journal is opened, so a
	// port in use leaves no new journal behind); or Listen, an address
	// Start binds after the journal is open.
	Listener net.Listener
	Listen   string
	Logger   *slog.Logger
}

// Replica is a running backup.
type Replica struct {
	b      *backup.Backup
	reg    *prometheus.Registry
	ln     net.Listener
	served chan error

	stopCtl   context.CancelFunc
	ctlDone   chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Start opens the backup's journal and volume, binds its listener, serves
// its control socket and starts answering primaries. On an error,
// whatever it started is closed again.
func Start(cfg Config) (r *Replica, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Backup.Logger == nil {
		cfg.Backup.Logger = cfg.Logger
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	cfg.Backup.Registry = cfg.Registry
	if cfg.Backup.Events == nil {
		cfg.Backup.Events = events.New()
	}
	r = &Replica{reg: cfg.Registry, ln: cfg.Listener, served: make(chan error, 1)}
	defer func() {
		if err != nil {
			r.Close()
			r = nil
		}
	}()
	if r.b, err = backup.Open(cfg.Backup); err != nil {
		return r, err
	}
	if r.ln == nil {
		if r.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return r, fmt.Errorf("listen for the primary: %w", err)
		}
	}
	if err = r.serveControl(cfg); err != nil {
		return r, err
	}
	go func() {
		err := r.b.Serve(r.ln)
		if errors.Is(err, backup.ErrClosed) {
			err = nil // Close came before Serve began: a clean end all the same
		}
		r.served <- err
	}()
	return r, nil
}

// serveControl answers the control socket on the backup's journal.
func (r *Replica) serveControl(cfg Config) error {
	ln, err := control.Listen(cfg.Backup.Journal)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	r.stopCtl, r.ctlDone = stop, make(chan struct{})
	volume := cfg.Backup.Volume
	go func() {
		defer close(r.ctlDone)
		control.Serve(ctx, ln, backupControl{b: r.b, volume: volume}, r.reg, cfg.Logger)
	}()
	return nil
}

// Backup is the receiving side.
func (r *Replica) Backup() *backup.Backup { return r.b }

// Registry holds the backup's metrics (pbfs_backup_*, pbfs_journal_*).
func (r *Replica) Registry() *prometheus.Registry { return r.reg }

// Events is the backup's stream of state changes.
func (r *Replica) Events() *events.Bus { return r.b.Events() }

// Health reports whether the backup is alive and ready (admin /readyz).
func (r *Replica) Health() health.Report { return r.b.Health() }

// Served delivers what stopped the backup serving its listener: an error,
// or nil once Close stopped it.
func (r *Replica) Served() <-chan error { return r.served }

// Close stops the control socket, then the backup (its streams store
// what they received, its listener closes, its journal is released). It
// may be called on a replica Start left half made, and more than once.
func (r *Replica) Close() error {
	r.closeOnce.Do(func() {
		if r.stopCtl != nil {
			r.stopCtl()
			<-r.ctlDone
		}
		if r.b != nil {
			r.closeErr = r.b.Close()
		}
		if r.ln != nil {
			// The backup closed it if it served it; not if Start failed
			// before it did.
			r.ln.Close()
		}
	})
	return r.closeErr
}
