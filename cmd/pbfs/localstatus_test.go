package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/fstest"
)

// pbfs status --journal, for a primary and for a running backup, as a
// table and as JSON; and a running backup's journal can be listed.
func TestLocalStatus(t *testing.T) {
	c := fstest.NewCluster(t, 2, nil)
	must(t, os.WriteFile(filepath.Join(c.Vol, "f"), []byte("x"), 0o644))
	c.WaitApplied(c.Barrier())
	down := c.Backups[1]
	down.Cmd.Process.Signal(syscall.SIGINT)
	down.Cmd.Wait()
	// Sealed by the timer, held by one backup only: the other lags.
	must(t, os.WriteFile(filepath.Join(c.Vol, "g"), []byte("lagging"), 0o644))
	time.Sleep(300 * time.Millisecond)
	out, code := run(t, "status", "--journal", c.Jdir)
	if code != 0 || !strings.Contains(out, "role       primary") && !strings.Contains(out, "primary") ||
		!strings.Contains(out, c.Backups[0].Addr) || !strings.Contains(out, down.Addr) {
		t.Fatalf("status of the primary: exit %d:\n%s", code, out)
	}
	var st control.Status
	out, code = run(t, "status", "--journal", c.Jdir, "--json")
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Role != "primary" || len(st.Backups) != 2 {
		t.Fatalf("status --json: exit %d %v:\n%s", code, err, out)
	}
	for _, b := range st.Backups {
		if b.Addr == down.Addr && !strings.Contains(b.State, "unreachable") && !strings.Contains(b.State, "connecting") {
			t.Errorf("the stopped backup's state: %q", b.State)
		}
		if b.Addr == down.Addr && (b.LagBatches < 1 || b.LagBytes <= 0 || b.LagAge <= 0) {
			t.Errorf("the stopped backup's lag: %+v", b)
		}
	}
	if st.JournalBytes <= 0 || st.JournalFree <= 0 || st.JournalReserve <= 0 || st.BarrierP50 <= 0 || st.BarrierP99 < st.BarrierP50 {
		t.Errorf("journal and barrier figures: %+v", st)
	}
	if out, _ := run(t, "status", "--journal", c.Jdir); !strings.Contains(out, "room for") || !strings.Contains(out, "LAG BYTES") || !strings.Contains(out, "p99") {
		t.Errorf("status table:\n%s", out)
	}
	b := c.Backups[0]
	out, code = run(t, "status", "--journal", b.Jdir, "--json")
	st = control.Status{}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Role != "backup" || st.Backup == nil || st.Backup.DurableSeq < 1 {
		t.Fatalf("status of a backup: exit %d %v:\n%s", code, err, out)
	}
	if out, code := run(t, "status", "--journal", b.Jdir); code != 0 || !strings.Contains(out, "backup") || !strings.Contains(out, "caught up") {
		t.Errorf("status table of a backup: exit %d:\n%s", code, out)
	}
	if out, code := run(t, "journal", "ls", "--journal", b.Jdir); code != 0 || strings.Count(out, "\n") < 2 {
		t.Errorf("journal ls of a running backup: exit %d:\n%s", code, out)
	}
	if out, code := run(t, "barrier", "--journal", b.Jdir); code != 1 || !strings.Contains(out, "ask its primary") {
		t.Errorf("barrier on a backup: exit %d:\n%s", code, out)
	}
	if _, code := run(t, "status"); code != 2 {
		t.Errorf("status with neither --journal nor --coordinator: exit %d, want 2", code)
	}
}
