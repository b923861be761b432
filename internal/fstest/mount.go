package fstest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/mount"
)

// Env is a mounted volume with its journal and a copy of its starting
// state. The mount is a `pbfs mount` process (see Binary for why).
type Env struct {
	T       testing.TB
	Dir     string // the test's temporary directory
	Vol     string // the mounted volume (mounted over itself)
	Start   string // copy of the volume as it was before mounting
	Journal string
	Proc    *Proc
	Client  *control.Client
	applied uint64 // last seq ReplayInto applied
	checks
}

// RequireFUSE skips the test when this machine cannot mount FUSE.
func RequireFUSE(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse: FUSE tests need it")
	}
}

// MountArgs turns the mount options of cfg into `pbfs mount` flags.
func MountArgs(cfg mount.Config) []string {
	var a []string
	if cfg.AllowOther {
		a = append(a, "--allow-other")
	}
	if cfg.NoCapture {
		a = append(a, "--no-capture")
	}
	if cfg.WriteDiff {
		a = append(a, "--write-diff")
	}
	if cfg.NoXattrs {
		a = append(a, "--no-xattrs")
	}
	if cfg.MaxBatchBytes > 0 {
		a = append(a, fmt.Sprintf("--batch-bytes=%d", cfg.MaxBatchBytes))
	}
	if cfg.SealInterval > 0 {
		a = append(a, "--seal-interval="+cfg.SealInterval.String())
	}
	return a
}

// Setup calls seed to fill a fresh volume, copies it as the starting state,
// and mounts pbfs over it with cfg's options. At the end of the test,
// unless it failed or called SkipChecks, the journal is verified and
// replayed onto the starting state and must equal the volume; then the
// mount is stopped. A failing test keeps its directory (TempDir).
func Setup(t testing.TB, cfg mount.Config, seed func(vol string)) *Env {
	t.Helper()
	RequireFUSE(t)
	dir := TempDir(t)
	e := &Env{T: t, Dir: dir, Vol: filepath.Join(dir, "vol"), Start: filepath.Join(dir, "start"), Journal: filepath.Join(dir, "journal")}
	for _, d := range []string{e.Vol, e.Start} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if seed != nil {
		seed(e.Vol)
	}
	CopyTree(t, e.Vol, e.Start)
	e.Proc = StartMount(t, nil, e.Vol, e.Journal, MountArgs(cfg)...)
	e.Client = e.Proc.Client()
	if cfg.NoCapture {
		e.skipped = "the mount captures nothing"
	}
	t.Cleanup(e.checkEnv)
	return e
}

// Barrier seals everything written so far and returns the seq.
func (e *Env) Barrier() uint64 {
	e.T.Helper()
	return e.Proc.Barrier()
}

// ReplayInto verifies every journaled batch not yet replayed and applies
// it to target.
func (e *Env) ReplayInto(target string) int {
	e.T.Helper()
	a, err := apply.New(target, nil)
	if err != nil {
		e.T.Fatal(err)
	}
	defer a.Close()
	var batches []*journal.Batch
	bad, err := journal.Walk(e.Client, e.applied+1, 0, true, func(c journal.Checked) error {
		if c.Err != nil {
			e.T.Fatalf("batch %d: %v", c.Seq, c.Err)
		}
		if c.Seq != e.applied+1+uint64(len(batches)) {
			e.T.Fatalf("replay: batch %d follows %d", c.Seq, e.applied+uint64(len(batches)))
		}
		batches = append(batches, c.Batch)
		return nil
	})
	if err != nil || bad > 0 {
		e.T.Fatalf("replay: %v (%d bad batches)", err, bad)
	}
	// A seal stored as a group of batches is replayed whole or not yet.
	batches, _ = journal.WholeSeals(batches)
	for _, b := range batches {
		if err := a.Apply(b); err != nil {
			e.T.Fatalf("replay: %v", err)
		}
		e.applied = b.Seq
	}
	return len(batches)
}

// CheckReplay takes a barrier, replays the journal onto the starting
// state and requires the result to equal the mounted volume.
func (e *Env) CheckReplay() {
	e.T.Helper()
	e.Barrier()
	e.ReplayInto(e.Start)
	RequireEqual(e.T, Snapshot(e.T, e.Vol), Snapshot(e.T, e.Start), "replica vs primary")
}

// WriteOwn writes data to a new file at p on a mount that this test
// process serves itself (mount.Start), with plain system calls. Go's os
// package registers each file it opens with its poller, and on a FUSE
// file that epoll_ctl sends the mount a POLL request while the calling
// thread keeps its P, outside the runtime's system-call accounting: with
// the other P busy, the reader that must answer the POLL never runs, and
// the test hangs in the kernel, unkillable.
func WriteOwn(t testing.TB, p string, data []byte) error {
	t.Helper()
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, data); err != nil {
		return &os.PathError{Op: "write", Path: p, Err: err}
	}
	return nil
}
