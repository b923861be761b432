package control

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/manifest"
	"github.com/pbfs/pbfs/internal/status"
)

// Other processes read the control socket's JSON (pbfs status and verify,
// the coordinator, scripts): its field names and how values are written
// are pinned here, every optional field set so that it shows.

// wantStatusJSON is GET /v1/status of wireStatus.
const wantStatusJSON = `{"role":"primary","volume":"/vol","volume_id":"v1","capture":true,"last_seq":12,"epoch":3,` +
	`"pending_bytes":4096,"nodes":7,"unclean_start":true,` +
	`"backups":[{"addr":"b1:7700","up":true,"acked_seq":11,"applied_seq":10,"stale":true,"degraded":true,"stalled":true,` +
	`"state":"resyncing 43 %","apply_blocked":"mkdir a: EEXIST","apply_blocked_seq":9,"resyncing":true,"resync_percent":43,` +
	`"resync":{"bytes":43,"total_bytes":100,"sent_bytes":5,"bytes_per_s":2.5,"left_ns":1000,"elapsed_ns":2000},` +
	`"lag_batches":1,"lag_bytes":512,"lag_bytes_at_least":true,"lag_age_ns":3000,"degraded_for_ns":4000,"resyncs":2}],` +
	`"acks":"1 of the 1 backups in the ack set (--ack one)",` +
	`"plugins":[{"name":"proxy","path":"/bin/http-proxy","state":"running","pid":42,"restarts":1,"since":"2024-01-02T03:04:05Z",` +
	`"info":{"name":"http-proxy","version":"1.0","kinds":["frontend","hint"],"mtls":true,"protocol":1},"last_error":"crashed",` +
	`"rules":[{"Pattern":"*.pid","Hint":{"LocalOnly":true,"Fsync":2,"Reason":"pid files"}}]}],` +
	`"backup":{"durable_seq":5,"applied_seq":4,"stalled":true,"journal_full":true,"apply_blocked":"rename b: ENOENT"},` +
	`"journal_bytes":1,"journal_free_bytes":2,"journal_reserve_bytes":3,"journal_check":"ok","journal_damaged_batches":4,` +
	`"barrier_p50_ns":5,"barrier_p95_ns":6,"barrier_p99_ns":7}`

var wireStatus = Status{Role: "primary", Volume: "/vol", VolumeID: "v1", Capture: true, LastSeq: 12, Epoch: 3,
	PendingBytes: 4096, Nodes: 7, UncleanStart: true,
	Backups: []status.Backup{{Addr: "b1:7700", Up: true, AckedSeq: 11, AppliedSeq: 10, Stale: true, Degraded: true, Stalled: true,
		State: "resyncing 43 %", ApplyBlocked: "mkdir a: EEXIST", ApplyBlockedSeq: 9, Resyncing: true, ResyncPercent: 43,
		Resync:     &status.ResyncProgress{Bytes: 43, TotalBytes: 100, SentBytes: 5, Rate: 2.5, Left: 1000, Elapsed: 2000},
		LagBatches: 1, LagBytes: 512, LagBytesAtLeast: true, LagAge: 3000, DegradedFor: 4000, Resyncs: 2}},
	Acks: "1 of the 1 backups in the ack set (--ack one)",
	Plugins: []status.Plugin{{Name: "proxy", Path: "/bin/http-proxy", State: status.PluginRunning, Pid: 42, Restarts: 1,
		Since:     time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC),
		Info:      status.PluginInfo{Name: "http-proxy", Version: "1.0", Kinds: []string{"frontend", "hint"}, MTLS: true, Protocol: 1},
		LastError: "crashed",
		Rules:     []status.Rule{{Pattern: "*.pid", Hint: status.PathHint{LocalOnly: true, Fsync: 2, Reason: "pid files"}}}}},
	Backup:       &BackupSide{DurableSeq: 5, AppliedSeq: 4, Stalled: true, JournalFull: true, ApplyBlocked: "rename b: ENOENT"},
	JournalBytes: 1, JournalFree: 2, JournalReserve: 3, JournalCheck: "ok", JournalDamaged: 4,
	BarrierP50: 5, BarrierP95: 6, BarrierP99: 7}

// wantComparisonJSON is POST /v1/compare's answer of wireComparison.
const wantComparisonJSON = `{"seq":12,"paused_ns":1000,"primary":{"a":{"path":"a","mode":420,"uid":0,"gid":0,"size":1}},` +
	`"backups":[{"backup":"b1:7700","entries":{"a":{"path":"a","mode":420,"uid":0,"gid":0,"size":1}},"error":"its replication stream is down"}]}`

var wireEntries = map[string]manifest.Entry{"a": {Path: "a", Mode: 0o644, Size: 1}}

var wireComparison = Comparison{Seq: 12, Paused: 1000, Primary: wireEntries,
	Backups: []status.BackupManifest{{Backup: "b1:7700", Entries: wireEntries, Err: "its replication stream is down"}}}

func TestStatusJSON(t *testing.T) { checkWire(t, wireStatus, wantStatusJSON) }

func TestManifestComparisonJSON(t *testing.T) { checkWire(t, wireComparison, wantComparisonJSON) }

// checkWire compares what the socket writes of v with want.
func checkWire(t *testing.T, v any, want string) {
	t.Helper()
	w := httptest.NewRecorder()
	writeJSON(w, v)
	if got := strings.TrimSuffix(w.Body.String(), "\n"); got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
}

func TestStatusJSONRoundTrip(t *testing.T) {
	var st Status
	if err := json.Unmarshal([]byte(wantStatusJSON), &st); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(st)
	if err != nil || string(b) != wantStatusJSON {
		t.Fatalf("decoded and encoded again: %v\n got %s\nwant %s", err, b, wantStatusJSON)
	}
}
