// Package status holds the shapes a running mount reports of itself: its
// backups as the primary sees them, their resyncs, a backup's manifest
// for pbfs verify, and its plugins. They are plain data, with the JSON
// the control socket sends; replicate and the plugin host fill them in,
// and control and the CLI read them without importing either.
package status

import (
	"fmt"
	"time"

	"github.com/pbfs/pbfs/internal/human"
	"github.com/pbfs/pbfs/internal/manifest"
)

// Backup describes one backup as the primary sees it.
type Backup struct {
	Addr       string `json:"addr"`
	Up         bool   `json:"up"`
	AckedSeq   uint64 `json:"acked_seq"`
	AppliedSeq uint64 `json:"applied_seq"`
	Stale      bool   `json:"stale"`
	Degraded   bool   `json:"degraded"` // dropped from the ack set by the degrade policy
	Stalled    bool   `json:"stalled"`  // the backup cannot apply what it holds
	State      string `json:"state"`    // in words: "up, holds seq 12", "unreachable since 12:03:04 (...)", "resyncing 43 %"
	// ApplyBlocked: the backup cannot apply batch ApplyBlockedSeq and
	// retries it; why, in its words (the op, its path, the errno).
	ApplyBlocked    string `json:"apply_blocked,omitempty"`
	ApplyBlockedSeq uint64 `json:"apply_blocked_seq,omitempty"`
	// Resyncing: a resync is under way, ResyncPercent of the volume's
	// bytes compared so far; Resync, how many, how fast, how long left.
	Resyncing     bool            `json:"resyncing,omitempty"`
	ResyncPercent float64         `json:"resync_percent,omitempty"`
	Resync        *ResyncProgress `json:"resync,omitempty"`
	// Lag: batches the backup does not hold yet, their stored bytes
	// (counted over a bounded number of batches; LagBytesAtLeast when
	// more) and the age of the oldest of them.
	LagBatches      uint64        `json:"lag_batches"`
	LagBytes        int64         `json:"lag_bytes"`
	LagBytesAtLeast bool          `json:"lag_bytes_at_least,omitempty"`
	LagAge          time.Duration `json:"lag_age_ns"`
	// DegradedFor: how long the degrade policy has kept it out of the ack
	// set (0: it is in).
	DegradedFor time.Duration `json:"degraded_for_ns,omitempty"`
	// Resyncs: how many resyncs of this backup the mount has finished
	// since it started (pbfs resync --wait waits for one more).
	Resyncs uint64 `json:"resyncs"`
	// LastResync: the latest finished resync's figures (nil: none yet).
	LastResync *ResyncProgress `json:"last_resync,omitempty"`
}

// ResyncProgress is a resync's progress as status reports it.
type ResyncProgress struct {
	Bytes      uint64        `json:"bytes"`       // compared so far
	TotalBytes uint64        `json:"total_bytes"` // to compare
	SentBytes  uint64        `json:"sent_bytes"`  // of blocks the backup lacked
	Rate       float64       `json:"bytes_per_s"` // compared, since it began
	Left       time.Duration `json:"left_ns"`     // at that rate (0: unknown)
	Elapsed    time.Duration `json:"elapsed_ns"`
}

// Percent is how much of the bytes to compare are compared.
func (r *ResyncProgress) Percent() float64 {
	if r.TotalBytes == 0 {
		return 100
	}
	return 100 * float64(r.Bytes) / float64(r.TotalBytes)
}

// String says it in words: "1.2 GiB of 2.8 GiB (43 %), 85 MiB/s, 19s left".
func (r *ResyncProgress) String() string {
	s := fmt.Sprintf("%s of %s (%.0f %%)", human.Bytes(int64(r.Bytes)), human.Bytes(int64(r.TotalBytes)), r.Percent())
	if r.Rate > 0 {
		s += fmt.Sprintf(", %s/s", human.Bytes(int64(r.Rate)))
	}
	if r.Left > 0 {
		s += fmt.Sprintf(", %v left", r.Left.Round(time.Second))
	}
	if r.SentBytes > 0 {
		s += fmt.Sprintf(", %s sent", human.Bytes(int64(r.SentBytes)))
	}
	return s
}

// BackupManifest is one backup's manifest, or why there is none.
type BackupManifest struct {
	Backup  string                    `json:"backup"`
	Entries map[string]manifest.Entry `json:"entries,omitempty"`
	Err     string                    `json:"error,omitempty"`
}

// PluginState is where a supervised plugin is in its life.
type PluginState string

const (
	PluginStarting   PluginState = "starting"
	PluginRunning    PluginState = "running"
	PluginRestarting PluginState = "restarting" // waiting out the backoff after a crash or a failed start
	PluginStopped    PluginState = "stopped"
)

// Plugin describes one supervised plugin.
type Plugin struct {
	Name      string      `json:"name"`
	Path      string      `json:"path"`
	State     PluginState `json:"state"`
	Pid       int         `json:"pid,omitempty"`
	Restarts  int         `json:"restarts"`
	Since     time.Time   `json:"since"`
	Info      PluginInfo  `json:"info"`
	LastError string      `json:"last_error,omitempty"`
	Rules     []Rule      `json:"rules,omitempty"` // a hint plugin's rules
}

// PluginInfo is what a plugin said about itself at launch, as status
// reports it. It has the fields of the plugin host's Info, which
// converts to it.
type PluginInfo struct {
	Name     string   `json:"name,omitempty"`
	Version  string   `json:"version,omitempty"`
	Kinds    []string `json:"kinds"`
	MTLS     bool     `json:"mtls"`
	Protocol int      `json:"protocol"` // the negotiated protocol version
}

// Rule is a hint plugin's rule as status reports it: the plugin SDK's
// Rule, whose fields carry no JSON tags, so its JSON names them as Go
// does.
type Rule struct {
	Pattern string
	Hint    PathHint
}

// PathHint is what a Rule says to do with the files it matches.
type PathHint struct {
	LocalOnly bool
	Fsync     int // the SDK's FsyncPolicy, by its number
	Reason    string
}
