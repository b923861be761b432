package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/health"
)

// readyz polls url's /readyz until it answers code, and returns the report.
func readyz(t *testing.T, addr string, code int, why string) health.Report {
	t.Helper()
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got, body := get(t, "http://"+addr+"/readyz", "")
		last = body
		if got != code {
			continue
		}
		var r health.Report
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("/readyz of %s: %v\n%s", addr, err, body)
		}
		return r
	}
	t.Fatalf("/readyz of %s never answered %d (%s); last:\n%s", addr, code, why, last)
	return health.Report{}
}

// /healthz and /readyz on a primary and its backup: ready once the stream
// is up, a primary not ready (and saying which backup) once the backup its
// --ack all needs is killed, and the gauges an alert rule reads.
func TestHealthAndReadiness(t *testing.T) {
	padmin, badmin := fstest.FreeAddr(t), fstest.FreeAddr(t)
	c := fstest.NewCluster(t, 1, nil, "--admin", padmin)
	b := c.Backups[0]
	b.Cmd.Process.Signal(syscall.SIGINT)
	b.Cmd.Wait()
	b.Args = append(b.Args, "--admin", badmin)
	c.StartBackup(b)

	if code, body := get(t, "http://"+badmin+"/healthz", ""); code != 200 || !strings.Contains(body, `"alive": true`) {
		t.Fatalf("backup /healthz: %d %s", code, body)
	}
	br := readyz(t, badmin, 200, "a backup the primary streams to")
	if br.Role != health.RoleBackup || len(br.Problems) != 0 {
		t.Fatalf("backup report: %+v", br)
	}
	pr := readyz(t, padmin, 200, "a primary whose one backup is up")
	if pr.Role != health.RolePrimary || len(pr.Lag) != 1 {
		t.Fatalf("primary report: %+v", pr)
	}

	_, pm := get(t, "http://"+padmin+"/metrics", "")
	for _, want := range []string{"pbfs_build_info{", `pbfs_role{role="primary"} 1`, `pbfs_role{role="backup"} 0`, "pbfs_ready 1",
		"pbfs_journal_epoch ", "pbfs_journal_last_seq ", `pbfs_replicate_backup_lag_batches{backup="` + b.Addr + `"}`,
		"go_goroutines ", "process_cpu_seconds_total "} {
		if !strings.Contains(pm, want) {
			t.Errorf("primary /metrics lacks %q", want)
		}
	}
	_, bm := get(t, "http://"+badmin+"/metrics", "")
	for _, want := range []string{`pbfs_role{role="backup"} 1`, "pbfs_ready 1", "pbfs_backup_apply_lag_batches ", "pbfs_backup_durable_seq "} {
		if !strings.Contains(bm, want) {
			t.Errorf("backup /metrics lacks %q", want)
		}
	}

	b.Cmd.Process.Kill()
	b.Cmd.Wait()
	pr = readyz(t, padmin, 503, "a primary under --ack all whose backup was killed")
	if pr.Ready || !strings.Contains(strings.Join(pr.Problems, "\n"), "backup "+b.Addr) {
		t.Fatalf("primary report after its backup died: %+v", pr)
	}
	if _, pm := get(t, "http://"+padmin+"/metrics", ""); !strings.Contains(pm, "pbfs_ready 0") {
		t.Error("primary /metrics: pbfs_ready is not 0 with its backup down")
	}
	if code, body := get(t, "http://"+padmin+"/healthz", ""); code != 200 {
		t.Errorf("primary /healthz with its backup down: %d %s (liveness must not fail a waiting primary)", code, body)
	}

	// The backup back, the primary gone: the backup is alive, not ready,
	// and says why.
	c.StartBackup(b)
	readyz(t, padmin, 200, "a primary whose backup came back")
	c.Primary.Stop()
	br = readyz(t, badmin, 503, "a backup whose primary stopped")
	if br.Role != health.RoleBackup || !strings.Contains(strings.Join(br.Problems, "\n"), "no primary streams to this backup") {
		t.Fatalf("backup report with no primary: %+v", br)
	}
	if code, _ := get(t, "http://"+badmin+"/healthz", ""); code != 200 {
		t.Errorf("backup /healthz with no primary: %d", code)
	}
}
