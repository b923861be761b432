// Package sdk is the public API for pbfs plugins. A plugin is a program
// whose main calls Serve with a value implementing Frontend, Hint or both;
// pbfs starts it as a child process, talks to it over gRPC with mutual
// TLS, restarts it if it crashes and stops it on unmount. Nothing here
// exposes go-plugin or protobuf; docs/PLUGINS.md shows a whole plugin.
package sdk

import (
	"context"
	"errors"
	"fmt"
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
// pattern ending in "/" matches everything below that directory, and one
// starting with "**/" matches at any depth ("**/*-shm"). The first rule
// that matches decides.
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

// FsyncPolicy says what a service's fsync of a file means
// (docs/ARCHITECTURE.md, "Fsync policies").
type FsyncPolicy int

const (
	// FsyncDefault leaves it to the host: the mount's --fsync policy,
	// local unless the operator chose otherwise.
	FsyncDefault FsyncPolicy = iota
	// FsyncLocal syncs the primary's disk only, as a plain directory
	// would; the backups hold the file once a later barrier covers it.
	FsyncLocal
	// FsyncBoth syncs the primary's disk and takes a barrier: when fsync
	// returns, everything written before it is durable on the ack set
	// and on the primary's disk.
	FsyncBoth
	// FsyncReplicated takes a barrier instead of syncing the primary's
	// disk: when fsync returns, everything written before it is durable
	// on the ack set (semi-synchronous replication's guarantee). The
	// primary's own copy is rebuilt from a backup if it crashes.
	FsyncReplicated
	// FsyncDeferred returns at once, syncing nothing: the write is
	// durable once a later barrier covers it, which the HTTP proxy's
	// output commit takes before it releases a response. For services
	// whose every client goes through such a frontend; a direct client's
	// commit is not durable anywhere when it returns. The primary's own
	// copy is rebuilt from a backup if it crashes.
	FsyncDeferred
)

var fsyncNames = []string{"default", "local", "both", "replicated", "deferred"}

func (p FsyncPolicy) String() string {
	if p >= 0 && int(p) < len(fsyncNames) {
		return fsyncNames[p]
	}
	return "unknown"
}

// ParseFsyncPolicy reads a policy's name (local, both, replicated,
// deferred or default).
func ParseFsyncPolicy(s string) (FsyncPolicy, error) {
	for i, n := range fsyncNames {
		if s == n {
			return FsyncPolicy(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want local, replicated, both or deferred)", ErrFsyncPolicy, s)
}

// ErrFsyncPolicy: a policy name pbfs does not know.
var ErrFsyncPolicy = errors.New("unknown fsync policy")

// Checker is implemented by hint plugins that can check a service's
// settings against replication under pbfs (`pbfs plugin check`, and the
// mount logs the findings at start).
type Checker interface {
	Check(ctx context.Context, env HintEnv) ([]Finding, error)
}

// Severity grades a Finding.
type Severity int

const (
	// SeverityOK: the setting is right for pbfs.
	SeverityOK Severity = iota
	// SeverityInfo: worth knowing, nothing to change.
	SeverityInfo
	// SeverityWarning: works, but costs speed or a guarantee the operator
	// may want.
	SeverityWarning
	// SeverityError: acknowledged data can be lost with this setting.
	SeverityError
)

var severityNames = []string{"ok", "info", "warning", "error"}

func (s Severity) String() string {
	if s >= 0 && int(s) < len(severityNames) {
		return severityNames[s]
	}
	return "unknown"
}

// Finding is one checked setting and what pbfs makes of it.
type Finding struct {
	Severity Severity
	Setting  string // e.g. innodb_flush_log_at_trx_commit
	Value    string // as the service will see it
	Message  string // why, and what to do
}

// Validator is implemented by plugins that can check their configuration
// without acting on it: pbfs asks before it mounts, so a mistake (a
// misspelt key, a bad value) stops the start with exit code 2 rather than
// the plugin later.
type Validator interface {
	Validate(Config) error
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
