package fstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/journal"
)

// TempDir returns a new directory for a test's volumes and journals. It
// is removed when the test ends unless the test failed: then it is kept
// and its path logged, so the journal, the volume and the copies that
// failed a check can be looked at (etcd-io/bbolt's btesting keeps a
// failing test's database the same way). Register it before anything
// mounted inside it: cleanups run last registered first, so the mounts
// are gone by the time it runs.
func TempDir(t testing.TB) string {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if len(name) > 60 {
		name = name[:60]
	}
	dir, err := os.MkdirTemp("", "pbfs-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept the test's directories (journals, volumes, copies) in %s", dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove the test's directory: %v", err)
		}
	})
	return dir
}

// checks says which invariants a test's teardown checks, and why a test
// opted out of them.
type checks struct {
	skipped string
}

// SkipChecks turns off the teardown checks of a mount or cluster for a
// test that breaks what they check on purpose (a volume changed behind the
// mount, a journal damaged, a backup that keeps files off by design); the
// reason is logged.
func (c *checks) SkipChecks(t testing.TB, reason string) {
	t.Helper()
	c.skipped = reason
	t.Logf("teardown checks off: %s", reason)
}

// run reports whether the teardown checks should run: not when the test
// failed already, opted out, or stopped the primary itself.
func (c *checks) run(t testing.TB, p *Proc) bool {
	return !t.Failed() && c.skipped == "" && p != nil && p.Cmd.ProcessState == nil
}

// checkEnv is the teardown of Setup's mount: invariant 1 (a replay of the
// journal onto the starting state equals the volume) and 6 (every batch's
// checksums and the seq chain verified on the way).
func (e *Env) checkEnv() {
	if !e.run(e.T, e.Proc) {
		return
	}
	e.T.Helper()
	e.CheckReplay()
}

// checkCluster is the teardown of a Cluster: the primary's journal
// verified and, where it still holds every batch from the first,
// replayed onto the starting state and compared with the volume; every
// backup the primary still streams to compared with the primary.
func (c *Cluster) checkCluster() {
	if !c.run(c.t, c.Primary) {
		return
	}
	c.t.Helper()
	e := &Env{T: c.t, Vol: c.Vol, Start: c.Start, Journal: c.Jdir, Proc: c.Primary, Client: c.Primary.Client()}
	for _, b := range c.Backups {
		if b.Cmd == nil || b.Cmd.ProcessState != nil {
			// A backup the test stopped may hold barriers up (--ack
			// all): the journal is verified as it stands.
			e.verify()
			return
		}
	}
	seq := c.Barrier()
	st, err := e.Client.Status(context.Background())
	if err != nil {
		c.t.Fatalf("teardown: status: %v", err)
	}
	// A replay starts from the first batch, and equals the volume only
	// if the mount never crashed with changes the journal lacks.
	if e.firstSeq() <= 1 && !st.UncleanStart {
		e.ReplayInto(e.Start)
		RequireEqual(c.t, Snapshot(c.t, c.Vol), Snapshot(c.t, c.Start), "replay of the primary's journal vs primary")
	} else {
		e.verify()
	}
	want := Snapshot(c.t, c.Vol)
	for i, b := range c.streaming(seq) {
		RequireEqual(c.t, want, Snapshot(c.t, b.Vol), fmt.Sprintf("backup %d (%s) vs primary", i, b.Addr))
	}
}

// streaming waits until every running backup the primary lists has
// applied seq and returns them; a backup the test stopped or removed is
// not compared.
func (c *Cluster) streaming(seq uint64) []*BackupProc {
	c.t.Helper()
	var out []*BackupProc
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := c.Primary.Client().Status(context.Background())
		if err != nil {
			c.t.Fatalf("teardown: status: %v", err)
		}
		out, behind := out[:0], ""
		for _, b := range c.Backups {
			if b.Cmd == nil || b.Cmd.ProcessState != nil {
				continue
			}
			for _, s := range st.Backups {
				if s.Addr != b.Addr {
					continue
				}
				if s.Up && !s.Stale && !s.Resyncing && s.AppliedSeq >= seq {
					out = append(out, b)
				} else {
					behind = fmt.Sprintf("%s: %+v", b.Addr, s)
				}
			}
		}
		if behind == "" {
			return out
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("teardown: a running backup did not apply seq %d: %s\nprimary:\n%s", seq, behind, c.Primary.Out)
		}
	}
}

// firstSeq returns the seq of the journal's oldest batch, 0 if it holds
// none.
func (e *Env) firstSeq() uint64 {
	var first uint64
	stop := errors.New("stop")
	if err := e.Client.Scan(0, func(seq uint64, _ []byte) error { first = seq; return stop }); err != nil && err != stop {
		e.T.Fatalf("teardown: scan the journal: %v", err)
	}
	return first
}

// verify checks every batch the journal holds (checksums, seq chain)
// without applying them.
func (e *Env) verify() {
	e.T.Helper()
	verifyJournal(e.T, e.Client, e.Journal)
}

// SkipChecks turns off the teardown checks of the mount, and the check
// of its journal when it stops.
func (e *Env) SkipChecks(t testing.TB, reason string) {
	t.Helper()
	e.checks.SkipChecks(t, reason)
	e.Proc.skipped = reason
}

// SkipChecks turns off the teardown checks of the cluster, and the check
// of the primary's journal when it stops.
func (c *Cluster) SkipChecks(t testing.TB, reason string) {
	t.Helper()
	c.checks.SkipChecks(t, reason)
	c.Primary.skipped = reason
}

// verifyJournal checks every batch of the journal a running mount serves
// through client: each one's checksums and the seq chain.
func verifyJournal(t testing.TB, client journal.Source, dir string) {
	t.Helper()
	bad, err := journal.Walk(client, 0, 0, true, func(c journal.Checked) error {
		if c.Err != nil {
			t.Errorf("journal %s: batch %d: %v", filepath.Base(dir), c.Seq, c.Err)
		}
		return nil
	})
	if err != nil || bad > 0 {
		t.Errorf("journal %s: %v (%d bad batches)", filepath.Base(dir), err, bad)
	}
}
