package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/journal"
)

// These tests run the real binary, as an operator would.

var pbfsBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pbfs-bin")
	if err != nil {
		panic(err)
	}
	pbfsBin = filepath.Join(dir, "pbfs")
	if out, err := exec.Command("go", "build", "-tags", "failpoints", "-o", pbfsBin, ".").CombinedOutput(); err != nil {
		panic(fmt.Sprintf("build pbfs: %v\n%s", err, out))
	}
	code := fstest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs pbfs and returns its combined output and exit code.
func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, pbfsBin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // a mount unmounts
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// Errorf, not Fatalf: some tests run commands from goroutines.
		t.Errorf("pbfs %s still ran after %s (serving where it should have refused?):\n%s", strings.Join(args, " "), runTimeout, out)
		return string(out), -1
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// runTimeout bounds a command run: none of them serves.
const runTimeout = 2 * time.Minute

// startMount runs `pbfs mount` (optionally under a prefix such as
// prlimit) and waits until it answers.
func startMount(t *testing.T, prefix []string, vol, journalDir string, extra ...string) *fstest.Proc {
	return fstest.StartMount(t, prefix, vol, journalDir, extra...)
}

func layout(t *testing.T) (vol, start, jdir string) {
	fstest.RequireFUSE(t)
	dir := t.TempDir()
	vol, start, jdir = filepath.Join(dir, "vol"), filepath.Join(dir, "start"), filepath.Join(dir, "j")
	os.Mkdir(vol, 0o755)
	os.Mkdir(start, 0o755)
	os.WriteFile(filepath.Join(vol, "existing"), []byte("before the mount"), 0o640)
	fstest.CopyTree(t, vol, start)
	return
}

func TestMountBarrierJournalReplay(t *testing.T) {
	vol, start, jdir := layout(t)
	// Only the barrier seals: batch 1 holds all of it, however slow the run.
	d := startMount(t, nil, vol, jdir, "--seal-interval", "1h")
	os.MkdirAll(filepath.Join(vol, "a/b"), 0o755)
	os.WriteFile(filepath.Join(vol, "a/b/file"), bytes.Repeat([]byte("data"), 5000), 0o600)
	os.Rename(filepath.Join(vol, "existing"), filepath.Join(vol, "a/renamed"))
	out, code := run(t, "barrier", "--journal", jdir)
	if code != 0 || strings.TrimSpace(out) == "0" {
		t.Fatalf("barrier: %q exit %d", out, code)
	}
	for _, sub := range []string{"ls", "stats", "verify"} {
		if out, code := run(t, "journal", sub, "--journal", jdir); code != 0 {
			t.Fatalf("journal %s while mounted: exit %d\n%s", sub, code, out)
		}
	}
	if out, _ := run(t, "journal", "show", "--journal", jdir, "1"); !strings.Contains(out, `rename`) || !strings.Contains(out, `"a/b/file"`) {
		t.Fatalf("journal show 1:\n%s", out)
	}
	want := fstest.Snapshot(t, vol)
	d.Stop()
	if fstest.Mounted(vol) {
		t.Fatal("still mounted after SIGINT")
	}
	if out, code := run(t, "journal", "replay", "--journal", jdir, "--from", "3", "--to", "2", start); code != 2 || !strings.Contains(out, "before --from") {
		t.Fatalf("replay of an empty range: exit %d, want 2:\n%s", code, out)
	}
	if out, code := run(t, "journal", "replay", "--journal", jdir, "--from", "99", start); code != 1 || !strings.Contains(out, "the journal ends at seq") {
		t.Fatalf("replay from past the journal's end: exit %d, want 1:\n%s", code, out)
	}
	if out, code := run(t, "journal", "replay", "--journal", jdir, start); code != 0 {
		t.Fatalf("replay: exit %d\n%s", code, out)
	}
	fstest.RequireEqual(t, want, fstest.Snapshot(t, start), "replayed copy vs volume")
}

// TestServedVolumeRefused: a backup, or a replay, into a volume a pbfs
// mount serves would write behind its capture; both are refused and the
// volume is left as it was.
func TestServedVolumeRefused(t *testing.T) {
	vol, _, jdir := layout(t)
	startMount(t, nil, vol, jdir, "--seal-interval", "1h")
	must(t, os.WriteFile(filepath.Join(vol, "a"), []byte("one"), 0o644))
	if out, code := run(t, "barrier", "--journal", jdir); code != 0 {
		t.Fatalf("barrier: exit %d\n%s", code, out)
	}
	want := fstest.Snapshot(t, vol)
	other := t.TempDir()
	out, code := run(t, "backup", "--listen", "127.0.0.1:0", "--token", "t", "--journal", filepath.Join(other, "bj"), vol)
	if code == 0 || !strings.Contains(out, "lies on the pbfs mount") {
		t.Errorf("backup into a served volume: exit %d:\n%s", code, out)
	}
	replayed := filepath.Join(other, "replayed")
	must(t, os.Mkdir(replayed, 0o755))
	if out, code := run(t, "journal", "replay", "--journal", jdir, vol); code != 1 || !strings.Contains(out, "lies on the pbfs mount") {
		t.Errorf("replay into the served volume: exit %d, want 1 (as mount and backup):\n%s", code, out)
	}
	if out, code := run(t, "journal", "replay", "--journal", jdir, replayed); code != 0 {
		t.Errorf("replay into a plain directory: exit %d:\n%s", code, out)
	}
	fstest.RequireEqual(t, want, fstest.Snapshot(t, vol), "the served volume after the refused commands")
}

// TestCorruptBatchIsReportedAndNeverApplied damages one stored batch:
// verify names it, replay refuses the range and leaves the target alone.
func TestCorruptBatchIsReportedAndNeverApplied(t *testing.T) {
	vol, start, jdir := layout(t)
	d := startMount(t, nil, vol, jdir)
	for i := 0; i < 3; i++ {
		os.WriteFile(filepath.Join(vol, fmt.Sprintf("f%d", i)), []byte("content"), 0o644)
		run(t, "barrier", "--journal", jdir)
	}
	d.Stop()
	st, err := journal.OpenStore(jdir, journal.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := st.Get(2)
	if err != nil {
		t.Fatal(err)
	}
	enc[len(enc)-3] ^= 0xff
	if err := st.Put(2, enc); err != nil {
		t.Fatal(err)
	}
	st.Close()
	before := fstest.Snapshot(t, start)
	out, code := run(t, "journal", "verify", "--journal", jdir)
	if code == 0 || !strings.Contains(out, "batch 2") || !strings.Contains(out, "corrupt") {
		t.Fatalf("verify of a corrupt journal: exit %d\n%s", code, out)
	}
	out, code = run(t, "journal", "replay", "--journal", jdir, start)
	if code == 0 || !strings.Contains(out, "refusing") {
		t.Fatalf("replay of a corrupt journal: exit %d\n%s", code, out)
	}
	fstest.RequireEqual(t, before, fstest.Snapshot(t, start), "target after refused replay")
	// A journal truncated mid-batch is caught the same way.
	st, _ = journal.OpenStore(jdir, journal.StoreOptions{})
	enc, _ = st.Get(3)
	st.Put(3, enc[:len(enc)/2])
	st.Close()
	if out, code := run(t, "journal", "ls", "--journal", jdir); code == 0 || !strings.Contains(out, "BAD") {
		t.Fatalf("ls of a truncated batch: exit %d\n%s", code, out)
	}
}

// TestFdExhaustion runs the mount under a hard limit of 128 descriptors
// and opens more files than that through it: callers get EMFILE, the
// mount logs and counts it, and keeps serving once files are closed.
func TestFdExhaustion(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit not installed")
	}
	vol, start, jdir := layout(t)
	d := startMount(t, []string{"prlimit", "--nofile=128:128"}, vol, jdir)
	var files []*os.File
	var emfile int
	for i := 0; i < 300; i++ {
		f, err := os.Create(filepath.Join(vol, fmt.Sprintf("f%03d", i)))
		if err != nil {
			if !strings.Contains(err.Error(), "too many open files") {
				t.Fatalf("open %d: %v (want EMFILE)", i, err)
			}
			emfile++
			continue
		}
		files = append(files, f)
	}
	if emfile == 0 {
		t.Fatal("no EMFILE under a limit of 128 descriptors")
	}
	for _, f := range files {
		f.Close()
	}
	if err := os.WriteFile(filepath.Join(vol, "after"), []byte("still serving"), 0o644); err != nil {
		t.Fatalf("write after exhaustion: %v", err)
	}
	if out, code := run(t, "barrier", "--journal", jdir); code != 0 {
		t.Fatalf("barrier after exhaustion: %s", out)
	}
	want := fstest.Snapshot(t, vol)
	d.Stop()
	if !strings.Contains(d.Out.String(), "EMFILE") && !strings.Contains(d.Out.String(), "too many open files") {
		t.Errorf("no log line about the exhausted descriptors:\n%s", d.Out)
	}
	// One line per kind of error, not one per failed open: a service
	// that retries in a loop would bury the log (512 lines in 150 ms).
	if n := strings.Count(d.Out.String(), "backing filesystem error"); n > 2 {
		t.Errorf("%d lines about the same exhausted descriptors:\n%s", n, d.Out)
	}
	if out, code := run(t, "journal", "replay", "--journal", jdir, start); code != 0 {
		t.Fatalf("replay: %s", out)
	}
	fstest.RequireEqual(t, want, fstest.Snapshot(t, start), "replayed copy vs volume")
}

// TestKill9AndRestart kills the mount without warning: every batch whose
// barrier returned is in the journal, the next mount clears the dead FUSE
// mount, and it reports the unclean start.
func TestKill9AndRestart(t *testing.T) {
	vol, start, jdir := layout(t)
	d := startMount(t, nil, vol, jdir)
	os.WriteFile(filepath.Join(vol, "acked"), []byte("covered by a barrier"), 0o644)
	if out, code := run(t, "barrier", "--journal", jdir); code != 0 {
		t.Fatal(out)
	}
	os.WriteFile(filepath.Join(vol, "unacked"), []byte("maybe lost from the journal"), 0o644)
	d.Kill()
	d2 := startMount(t, nil, vol, jdir)
	if !strings.Contains(d2.Out.String(), "did not shut down cleanly") {
		t.Errorf("no warning about the unclean shutdown:\n%s", d2.Out)
	}
	if data, err := os.ReadFile(filepath.Join(vol, "acked")); err != nil || string(data) != "covered by a barrier" {
		t.Fatalf("after restart: %q %v", data, err)
	}
	d2.Stop()
	if out, code := run(t, "journal", "verify", "--journal", jdir); code != 0 {
		t.Fatalf("verify after kill -9: %s", out)
	}
	if out, code := run(t, "journal", "replay", "--journal", jdir, start); code != 0 {
		t.Fatalf("replay after kill -9: %s", out)
	}
	if data, _ := os.ReadFile(filepath.Join(start, "acked")); string(data) != "covered by a barrier" {
		t.Fatalf("a write covered by a returned barrier is missing from the journal: %q", data)
	}
	// The second mount shut down cleanly: a third starts without warning.
	d3 := startMount(t, nil, vol, jdir)
	d3.Stop()
	if strings.Contains(d3.Out.String(), "did not shut down cleanly") {
		t.Errorf("warning after a clean shutdown:\n%s", d3.Out)
	}
}

// TestJournalFullIsRetried: the journal refuses appends (ENOSPC, injected
// with a failpoint): barriers fail with the error meanwhile, the mount logs
// and counts it and keeps serving, and once the journal takes appends again
// nothing captured is missing.
func TestJournalFullIsRetried(t *testing.T) {
	vol, start, jdir := layout(t)
	os.Setenv("PBFS_FAILPOINT_APPEND", "40")
	d := startMount(t, nil, vol, jdir, "--seal-interval", "10ms")
	os.Unsetenv("PBFS_FAILPOINT_APPEND")
	for i := 0; i < 5; i++ {
		if err := os.WriteFile(filepath.Join(vol, fmt.Sprintf("f%d", i)), bytes.Repeat([]byte{byte(i)}, 5000), 0o644); err != nil {
			t.Fatalf("write while the journal is full: %v", err)
		}
	}
	sawFailure := false
	for i := 0; i < 200; i++ {
		out, code := run(t, "barrier", "--journal", jdir)
		if code != 0 {
			if !strings.Contains(out, "no space left on device") {
				t.Fatalf("barrier failed without naming the cause: %s", out)
			}
			sawFailure = true
			continue
		}
		break
	}
	if d.Counter("pbfs_journal_append_failures_total", "") == 0 || !strings.Contains(d.Out.String(), "journal append failed") {
		t.Fatalf("append failures not counted or logged:\n%s", d.Out)
	}
	if !sawFailure {
		t.Fatal("no barrier failed while the journal refused appends")
	}
	want := fstest.Snapshot(t, vol)
	d.Stop()
	if out, code := run(t, "journal", "replay", "--journal", jdir, start); code != 0 {
		t.Fatalf("replay: %s", out)
	}
	fstest.RequireEqual(t, want, fstest.Snapshot(t, start), "replayed copy vs volume after journal failures")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// controlMetrics scrapes the /metrics of the pbfs process (mount or
// backup) whose journal is jdir, through its control socket.
func controlMetrics(t *testing.T, jdir string) string {
	t.Helper()
	c, err := control.Dial(jdir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	text, err := c.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// openUp lets other users search the directories dirs, adding the bits
// and taking none: one of them may be the machine's /tmp (a cluster's
// directory lies right under it), which lost its sticky bit and its
// write permission for others when this set 0755.
func openUp(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		st, err := os.Stat(d)
		must(t, err)
		if st.Mode()&0o055 != 0o055 {
			must(t, os.Chmod(d, st.Mode()|0o055))
		}
	}
}
