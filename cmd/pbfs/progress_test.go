package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/fstest"
)

// Long operations report progress; not on a terminal, as plain lines
// with a rate and an ETA. pbfs resync --wait follows a resync to its end.
func TestProgressLines(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	for i := 0; i < 20; i++ {
		must(t, os.WriteFile(filepath.Join(c.Vol, fmt.Sprint("f", i)), []byte(strings.Repeat("x", 1000*i)), 0o644))
		c.Barrier()
	}
	for _, args := range [][]string{
		{"journal", "verify", "--journal", c.Jdir},
		{"journal", "replay", "--journal", c.Jdir, t.TempDir()},
	} {
		cmd := exec.Command(pbfsBin, args...)
		cmd.Env = append(os.Environ(), "PBFS_PROGRESS_EVERY=1ns")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), " batches (") || !strings.Contains(string(out), "batches/s") {
			t.Errorf("pbfs %s: %v\n%s", strings.Join(args[:2], " "), err, out)
		}
	}
	out, code := run(t, "resync", "--journal", c.Jdir, "--wait", "--timeout", "60s")
	if code != 0 || !strings.Contains(out, "every backup is resynced") {
		t.Fatalf("resync --wait: exit %d:\n%s", code, out)
	}
	c.RequireConverged()
}

// pbfs resync --wait shows bytes compared, a rate and the time left, and
// never goes back; its last line says how many bytes it compared.
func TestResyncProgressBytes(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	buf := make([]byte, 4<<20)
	for i := 0; i < 16; i++ {
		rand.Read(buf)
		must(t, os.WriteFile(filepath.Join(c.Vol, fmt.Sprint("f", i)), buf, 0o644))
	}
	c.RequireConverged()
	cmd := exec.Command(pbfsBin, "resync", "--journal", c.Jdir, "--wait", "--timeout", "60s")
	cmd.Env = append(os.Environ(), "PBFS_PROGRESS_EVERY=1ns")
	raw, err := cmd.CombinedOutput()
	out := string(raw)
	if err != nil || !strings.Contains(out, "every backup is resynced: 1 of them, 64.0 MiB compared") {
		t.Fatalf("resync --wait: %v:\n%s", err, out)
	}
	// The figures stay in status once it ended: a resync can end between
	// two of --wait's looks, which then said "0 B compared".
	var st control.Status
	if out, code := run(t, "status", "--journal", c.Jdir, "--json"); code != 0 || json.Unmarshal([]byte(out), &st) != nil ||
		len(st.Backups) != 1 || st.Backups[0].LastResync == nil || st.Backups[0].LastResync.TotalBytes != 64<<20 {
		t.Fatalf("status --json after the resync: exit %d, want last_resync of 64 MiB:\n%s", code, out)
	}
	last := -1
	for _, l := range strings.Split(out, "\n") {
		var pct int
		if _, after, ok := strings.Cut(l, " of 64.0 MiB ("); ok {
			fmt.Sscanf(after, "%d", &pct)
			if pct < last || !strings.Contains(l, "/s") {
				t.Fatalf("progress went back or lacks a rate at %q:\n%s", l, out)
			}
			last = pct
		}
	}
}

// Every journal command speaks JSON with --json, and the JSON says what
// the table does.
func TestJournalJSON(t *testing.T) {
	vol, _, jdir := layout(t)
	p := startMount(t, nil, vol, jdir)
	for i := 0; i < 3; i++ {
		must(t, os.WriteFile(filepath.Join(vol, fmt.Sprint("j", i)), []byte("json"), 0o644))
		p.Barrier()
	}
	for _, args := range [][]string{
		{"journal", "ls"}, {"journal", "show"}, {"journal", "stats"}, {"journal", "verify"}, {"journal", "replay"},
	} {
		argv := append(args, "--json", "--journal", jdir)
		switch args[1] {
		case "show":
			argv = append(argv, "2")
		case "replay":
			argv = append(argv, t.TempDir())
		}
		out, code := run(t, argv...)
		var v any
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
			t.Errorf("pbfs %s --json: exit %d, not JSON:\n%s", strings.Join(args, " "), code, out)
		}
		if args[1] == "ls" {
			if rows, ok := v.([]any); !ok || len(rows) < 3 {
				t.Errorf("journal ls --json: %v", v)
			}
		}
	}
}
