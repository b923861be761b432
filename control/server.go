// Package control is the local control socket of a running mount: a small
// HTTP API on a unix socket kept in the journal directory. `pbfs barrier`
// and `pbfs journal` use it (the journal is locked while the mount runs),
// and it serves the mount's Prometheus metrics.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pbfs/pbfs/internal/manifest"
	"github.com/pbfs/pbfs/internal/ratelog"
	"github.com/pbfs/pbfs/internal/status"
)

// SocketName is the control socket's file name inside the journal directory.
const SocketName = "control.sock"

// maxSocketPath is the longest unix socket path Linux accepts.
const maxSocketPath = 107

// ErrNoMount means no mount answers on the journal's control socket.
var ErrNoMount = errors.New("no running mount for this journal")

// Status describes a running mount.
type Status struct {
	Role         string `json:"role"` // primary or backup
	Volume       string `json:"volume"`
	VolumeID     string `json:"volume_id"`
	Capture      bool   `json:"capture"`
	LastSeq      uint64 `json:"last_seq"`
	Epoch        uint64 `json:"epoch"`
	PendingBytes int64  `json:"pending_bytes"`
	Nodes        int    `json:"nodes"`
	// UncleanStart: the mount before this one crashed, so the volume may
	// hold changes the journal lacks.
	UncleanStart bool `json:"unclean_start"`
	// Backups, when the mount replicates, and what a barrier needs of
	// them (replicate.Primary.AckSummary).
	Backups []status.Backup `json:"backups,omitempty"`
	Acks    string          `json:"acks,omitempty"`
	// Plugins, when the mount runs any.
	Plugins []status.Plugin `json:"plugins,omitempty"`
	// Backup, when this is a backup: how far it is.
	Backup *BackupSide `json:"backup,omitempty"`
	// The journal: bytes on disk, free bytes on its file system and the
	// reserve kept free (appends stop at the reserve).
	JournalBytes   int64 `json:"journal_bytes,omitempty"`
	JournalFree    int64 `json:"journal_free_bytes,omitempty"`
	JournalReserve int64 `json:"journal_reserve_bytes,omitempty"`
	// JournalCheck says what the check of the journal's batches after
	// the start found (journal.BatchCheck), JournalDamaged how many of
	// them are damaged on disk.
	JournalCheck   string `json:"journal_check,omitempty"`
	JournalDamaged uint64 `json:"journal_damaged_batches,omitempty"`
	// Barrier latency over the last (up to 1024) barriers.
	BarrierP50 time.Duration `json:"barrier_p50_ns,omitempty"`
	BarrierP95 time.Duration `json:"barrier_p95_ns,omitempty"`
	BarrierP99 time.Duration `json:"barrier_p99_ns,omitempty"`
}

// BackupSide is a backup's own view of its progress.
type BackupSide struct {
	DurableSeq uint64 `json:"durable_seq"` // in its journal, synced
	AppliedSeq uint64 `json:"applied_seq"` // applied to its volume
	Stalled    bool   `json:"stalled"`     // cannot apply what it holds: needs a resync
	// JournalFull: its journal refused the last batch for want of space,
	// so it acks nothing until it has room.
	JournalFull bool `json:"journal_full,omitempty"`
	// ApplyBlocked: a batch it cannot apply and retries, in words (the
	// op, its path, the errno, what would help).
	ApplyBlocked string `json:"apply_blocked,omitempty"`
}

// Backend is what the socket exposes.
type Backend interface {
	Barrier(ctx context.Context) (uint64, error)
	Resync(backups []string) error // none: every backup
	Status() Status
	Get(seq uint64) ([]byte, error)
	Scan(from uint64, fn func(seq uint64, enc []byte) error) error
	// Manifest lists the volume as the backups should have it (local-only
	// paths left out), or only paths (pbfs verify).
	Manifest(ctx context.Context, paths []string, fn func(manifest.Entry) error) error
	// Compare lists paths on the primary and on every backup exactly as
	// of one batch, with the service's mutations paused (pbfs verify).
	Compare(ctx context.Context, paths []string) (Comparison, error)
}

// MaxComparePaths is the most paths one Compare takes: the service's
// mutations are paused while they are hashed.
const MaxComparePaths = 1024

// pathsRequest is the body of POST /v1/manifest and /v1/compare: paths,
// those that are not UTF-8 in base64 (JSON strings cannot hold them).
// resyncRequest names the backups to resync (none: every one).
type resyncRequest struct {
	Backups []string `json:"backups,omitempty"`
}

type pathsRequest struct {
	Paths    []string `json:"paths"`
	PathsB64 [][]byte `json:"paths_b64,omitempty"`
}

func newPathsRequest(paths []string) pathsRequest {
	var r pathsRequest
	r.Paths, r.PathsB64 = manifest.SplitUTF8(paths)
	return r
}

// merge moves the base64 paths into Paths.
func (r *pathsRequest) merge() {
	for _, p := range r.PathsB64 {
		r.Paths = append(r.Paths, string(p))
	}
	r.PathsB64 = nil
}

// Comparison is paths on the primary and on each backup, all as of batch
// Seq; Paused is how long the service's mutations waited for it.
type Comparison struct {
	Seq     uint64                    `json:"seq"`
	Paused  time.Duration             `json:"paused_ns"`
	Primary map[string]manifest.Entry `json:"primary"`
	Backups []status.BackupManifest   `json:"backups"`
}

// SocketPath returns the control socket path for a journal directory.
func SocketPath(journalDir string) (string, error) {
	p := filepath.Join(journalDir, SocketName)
	if len(p) > maxSocketPath {
		return "", fmt.Errorf("control socket path %q is %d bytes, longer than the %d a unix socket allows: use a shorter journal path", p, len(p), maxSocketPath)
	}
	return p, nil
}

// Listen opens the journal's control socket, replacing a stale one.
func Listen(journalDir string) (net.Listener, error) {
	p, err := SocketPath(journalDir)
	if err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", p, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("listen on %s: another mount already serves this journal", p)
	}
	os.Remove(p)
	ln, err := net.Listen("unix", p)
	if err != nil {
		return nil, fmt.Errorf("listen on control socket: %w", err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on control socket: %w", err)
	}
	return ln, nil
}

// Serve answers requests on ln until ctx ends, then removes the socket.
func Serve(ctx context.Context, ln net.Listener, b Backend, reg *prometheus.Registry, log *slog.Logger) error {
	p := ln.Addr().String()
	mux := http.NewServeMux()
	failed := ratelog.New(time.Second)
	mux.HandleFunc("POST /v1/barrier", serveBarrier(b, log, failed))
	mux.HandleFunc("POST /v1/manifest", serveManifest(b))
	mux.HandleFunc("POST /v1/compare", serveCompare(b, log))
	mux.HandleFunc("POST /v1/resync", serveResync(b))
	mux.HandleFunc("GET /v1/status", serveStatus(b))
	mux.HandleFunc("POST /v1/members/add", serveAddMember(b, log))
	mux.HandleFunc("POST /v1/members/remove", serveRemoveMember(b, log))
	mux.HandleFunc("POST /v1/backups/manifest", serveBackupManifest(b, log))
	mux.HandleFunc("GET /v1/events", serveEvents(b))
	mux.HandleFunc("GET /v1/batches/{seq}", serveBatch(b, log))
	mux.HandleFunc("GET /v1/batches", serveBatches(b, log))
	if reg != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	}
	// Idle connections are closed after a while: a client that leaks
	// its connections (a new Client per call, never closed) must not
	// exhaust the daemon's descriptors.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}
	// The socket is gone when Serve returns for ctx: a node changing
	// roles listens on the same path again right after.
	removed := make(chan struct{})
	go func() {
		defer close(removed)
		<-ctx.Done()
		srv.Close()
		os.Remove(p)
	}()
	err := srv.Serve(ln)
	if ctx.Err() != nil {
		<-removed
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
