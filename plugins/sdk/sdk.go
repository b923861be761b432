// Package sdk is the public API for pbfs plugins. A plugin is a program
// whose main calls Serve with a value implementing Frontend, Hint or both;
// pbfs starts it as a child process, talks to it over gRPC with mutual
// TLS, restarts it if it crashes and stops it on unmount. Nothing here
// exposes go-plugin or protobuf; docs/PLUGINS.md shows a whole plugin.
package sdk

import (
	"context"
	"errors"
	"log/slog"
)

// ProtocolVersion is the major version of the plugin protocol this SDK
// speaks. A pbfs host accepts its own version and the one before.
const ProtocolVersion = 1

// ErrHostGone means the pbfs host could not be reached (it is shutting
// down, or restarted the plugin's connection).
var ErrHostGone = errors.New("pbfs host unreachable")

// ErrBarrier means the host could not make the writes durable on the ack
// set (a backup is down and the policy waits for it, the journal refused
// the batch, this primary was fenced...). What it covers must not be
// acknowledged to clients.
var ErrBarrier = errors.New("barrier failed")

// Host is a plugin's handle on the pbfs primary that started it.
type Host interface {
	// Barrier returns once everything written to the volume before the
	// call is durable on the ack set, with the seq of the batch that
	// covers it. A barrier with nothing new returns at once.
	Barrier(ctx context.Context) (uint64, error)
	// Status describes the mount and its backups.
	Status(ctx context.Context) (Status, error)
}

// Status describes a running primary.
type Status struct {
	Volume   string // the mountpoint the service sees
	VolumeID string
	Epoch    uint64
	LastSeq  uint64 // the last batch sealed into the journal
	Capture  bool
	Backups  []Backup
}

// Backup is one backup as the primary sees it.
type Backup struct {
	Addr       string
	Up         bool
	AckedSeq   uint64 // durable on the backup
	AppliedSeq uint64 // applied to its copy of the volume
	Stale      bool   // out of the ack set until resynced
}

// Env is what a frontend gets when it starts.
type Env struct {
	Name   string // the name the operator gave this plugin
	Volume string // the mountpoint the service sees
	Config Config
	Host   Host
	Logger *slog.Logger // lines go to the host's log, tagged with the plugin
}

// Frontend stands in front of the service (an HTTP proxy, for example).
type Frontend interface {
	// Start begins serving and returns once it does; it must not block
	// for the plugin's lifetime. An error stops the plugin; the host logs
	// it and tries again later.
	Start(ctx context.Context, env Env) error
	// Stop finishes what is in flight (within ctx) and stops.
	Stop(ctx context.Context) error
}

// HintEnv is what a hint plugin is asked with.
type HintEnv struct {
	Name   string
	Volume string
	Config Config
	Logger *slog.Logger
}

// Hint teaches pbfs about the files of one kind of service: which are
// local-only (never captured or shipped, like a database's temporary
// tables) and which fsync policy applies to them.
type Hint interface {
	// Rules returns path rules for the volume; the host asks once per
	// start and evaluates them itself on the data path (see Match).
	Rules(ctx context.Context, env HintEnv) ([]Rule, error)
	// Classify answers for individual volume-relative paths, one hint
	// per path, for what rules cannot express. MatchAll is a fine
	// implementation when they can.
	Classify(ctx context.Context, paths []string) ([]PathHint, error)
}

// Rule applies a hint to every path that matches Pattern: a
// slash-separated path.Match pattern relative to the volume root; a
// pattern ending in "/" matches everything below that directory.
type Rule struct {
	Pattern string
	Hint    PathHint
}

// PathHint is what pbfs should do with one file.
type PathHint struct {
	LocalOnly bool
	Fsync     FsyncPolicy
	Reason    string // shown in logs and by `pbfs plugin check`
}

// FsyncPolicy says what a service's fsync of a file means.
type FsyncPolicy int

const (
	// FsyncDefault leaves it to the host (today: sync the primary's disk).
	FsyncDefault FsyncPolicy = iota
	// FsyncLocal syncs the primary's disk only.
	FsyncLocal
	// FsyncBarrier also takes a barrier, so the file is durable on the
	// ack set when fsync returns (a database's redo log).
	FsyncBarrier
	// FsyncSkip returns at once: the backups are the durability.
	FsyncSkip
)

var fsyncNames = []string{"default", "local", "barrier", "skip"}

func (p FsyncPolicy) String() string {
	if p >= 0 && int(p) < len(fsyncNames) {
		return fsyncNames[p]
	}
	return "unknown"
}

// Info describes a plugin; implement Describer to set it.
type Info struct {
	Name    string
	Version string
}

// Describer is implemented by plugins that name themselves.
type Describer interface {
	Info() Info
}
