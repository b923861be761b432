package health

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestReadyzCodes(t *testing.T) {
	rep := Report{Role: RolePrimary, Problems: []string{"barriers wait"}}.Judge()
	mux := http.NewServeMux()
	detail := false
	Handle(mux, func() Report { return rep }, func(*http.Request) bool { return detail })
	ask := func(path string) (int, string) {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code, w.Body.String()
	}
	if code, body := ask("/readyz"); code != 503 || body != "not ready\n" {
		t.Errorf("not ready, no detail: %d %q", code, body)
	}
	if code, body := ask("/healthz"); code != 200 || body != "alive\n" {
		t.Errorf("healthz: %d %q", code, body)
	}
	detail = true
	if code, body := ask("/readyz"); code != 503 || !strings.Contains(body, "barriers wait") {
		t.Errorf("not ready, detail: %d %q", code, body)
	}
	rep = Report{Role: RoleBackup}.Judge()
	if code, _ := ask("/readyz"); code != 200 {
		t.Errorf("ready: %d", code)
	}
}

func TestGauges(t *testing.T) {
	rep := Report{Role: RoleBackup, Epoch: 3, LastSeq: 10, AppliedSeq: 7}.Judge()
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collectors(func() Report { return rep }, "v1")...)
	want := `
# HELP pbfs_backup_apply_lag_batches Batches a backup holds durably but has not applied to its copy yet.
# TYPE pbfs_backup_apply_lag_batches gauge
pbfs_backup_apply_lag_batches 3
# HELP pbfs_journal_epoch The term (epoch) the journal is at.
# TYPE pbfs_journal_epoch gauge
pbfs_journal_epoch 3
# HELP pbfs_ready 1 while the process serves its role (what /readyz answers 200 to), else 0.
# TYPE pbfs_ready gauge
pbfs_ready 1
# HELP pbfs_role 1 for the role this process serves now (primary, backup or none), 0 for the others.
# TYPE pbfs_role gauge
pbfs_role{role="backup"} 1
pbfs_role{role="none"} 0
pbfs_role{role="primary"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pbfs_backup_apply_lag_batches", "pbfs_journal_epoch", "pbfs_ready", "pbfs_role"); err != nil {
		t.Error(err)
	}
}
