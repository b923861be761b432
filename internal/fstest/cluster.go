package fstest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestToken is the replication token test clusters use.
const TestToken = "test-token-0123456789"

var (
	givenMu sync.Mutex
	given   = map[string]bool{} // addresses FreeAddr returned
)

// FreeAddr returns a loopback address nobody listens on. It picks a
// random port below the kernel's ephemeral range: a port from that range
// (what listening on port 0 gives) can be taken, between this call and
// the listen that follows it, as the source port of any outgoing
// connection of the tests running in parallel, and the listen then fails
// with EADDRINUSE. It never returns one address twice in a test binary:
// two picked before either is listened on (a service and a node of one
// cluster, say) would otherwise meet now and then.
func FreeAddr(t testing.TB) string {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &low)
	}
	givenMu.Lock()
	defer givenMu.Unlock()
	for try := 0; try < 200 && low > 12000; try++ {
		addr := fmt.Sprintf("127.0.0.1:%d", 10000+rand.IntN(low-10000))
		if given[addr] {
			continue
		}
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			given[addr] = true
			return addr
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Cluster is a primary mount and its backups, each a real process.
type Cluster struct {
	t       testing.TB
	Dir     string
	Vol     string // the primary's volume (mounted)
	Start   string // a copy of the volume as it was before mounting
	Jdir    string // the primary's journal
	Primary *Proc
	Backups []*BackupProc
	checks
}

// BackupProc is one `pbfs backup` process.
type BackupProc struct {
	Addr, Vol, Jdir string
	Cmd             *exec.Cmd
	Out             *Buffer
	Env             []string // added to the environment of the next StartBackup
	Args            []string // added to the command line of the next StartBackup
}

// NewCluster starts backups on copies of the seeded volume and a primary
// mounted over it with --ack all; everything stops in Cleanup.
func NewCluster(t testing.TB, backups int, seed func(string), mountArgs ...string) *Cluster {
	return NewClusterCopy(t, backups, seed, true, mountArgs...)
}

// NewClusterCopy starts the backups on copies of the seeded volume, or, with
// copy false, on empty directories that a resync must fill. At the end of
// the test, unless it failed, called SkipChecks or stopped the primary,
// the primary's journal is verified (and replayed onto the starting state
// and compared with the volume while it holds every batch), and every
// backup still running and streaming is compared with the primary. A
// failing test keeps its directory (TempDir).
func NewClusterCopy(t testing.TB, backups int, seed func(string), copy bool, mountArgs ...string) *Cluster {
	RequireFUSE(t)
	c := &Cluster{t: t, Dir: TempDir(t)}
	c.Vol, c.Jdir, c.Start = filepath.Join(c.Dir, "vol"), filepath.Join(c.Dir, "jp"), filepath.Join(c.Dir, "start")
	os.Mkdir(c.Vol, 0o755)
	os.Mkdir(c.Start, 0o755)
	if seed != nil {
		seed(c.Vol)
	}
	CopyTree(t, c.Vol, c.Start)
	for i := 0; i < backups; i++ {
		b := &BackupProc{Addr: FreeAddr(t), Vol: filepath.Join(c.Dir, fmt.Sprintf("b%d", i)), Jdir: filepath.Join(c.Dir, fmt.Sprintf("jb%d", i))}
		os.Mkdir(b.Vol, 0o755)
		if copy {
			CopyTree(t, c.Vol, b.Vol)
			b.Args = []string{"--adopt"} // a copy of the primary's volume
		}
		c.Backups = append(c.Backups, b)
		c.StartBackup(b)
	}
	var args []string
	for _, b := range c.Backups {
		args = append(args, "--backup", b.Addr)
	}
	os.Setenv("PBFS_TOKEN", TestToken)
	c.Primary = StartMount(t, nil, c.Vol, c.Jdir, append(append(args, "--ack", "all"), mountArgs...)...)
	if slices.Contains(mountArgs, "--local-only") {
		c.skipped = "local-only files are neither journaled nor sent to the backups"
	}
	t.Cleanup(c.checkCluster)
	return c
}

// StartBackup (re)starts b and waits until it listens.
func (c *Cluster) StartBackup(b *BackupProc) {
	args := append([]string{"backup", "--listen", b.Addr, "--journal", b.Jdir, "--token", TestToken}, b.Args...)
	b.Cmd = exec.Command(Binary(c.t), append(args, b.Vol)...)
	if len(b.Env) > 0 {
		b.Cmd.Env = append(os.Environ(), b.Env...)
	}
	b.Out = &Buffer{}
	b.Cmd.Stdout, b.Cmd.Stderr = b.Out, b.Out
	// After the backup stops: one killed leaves its copy's guard mounted.
	c.t.Cleanup(func() { DetachAll(b.Vol) })
	if err := b.Cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	cmd := b.Cmd
	c.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGINT)
			cmd.Wait()
		}
	})
	for i := 0; i < 200; i++ {
		if conn, err := net.Dial("tcp", b.Addr); err == nil {
			conn.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("backup did not come up:\n%s", b.Out)
}

// Barrier takes a barrier through the control socket.
func (c *Cluster) Barrier() uint64 {
	c.t.Helper()
	return c.Primary.Barrier()
}

// WaitApplied waits until every backup is streaming, in sync with the
// primary, and has applied seq. A backup that is still connecting or in
// its first resync reports applied seq 0, which a barrier of a mount with
// nothing written yet (seq 0) would otherwise take for caught up.
func (c *Cluster) WaitApplied(seq uint64) {
	c.t.Helper()
	cl := c.Primary.Client()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := cl.Status(context.Background())
		if err == nil {
			done := 0
			for _, b := range st.Backups {
				if b.Up && !b.Stale && !b.Resyncing && b.AppliedSeq >= seq {
					done++
				}
			}
			if done == len(c.Backups) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, _ := cl.Status(context.Background())
	var logs strings.Builder
	for i, b := range c.Backups {
		fmt.Fprintf(&logs, "backup %d:\n%s\n", i, b.Out)
	}
	c.t.Fatalf("backups did not apply seq %d: %+v\n%sprimary:\n%s", seq, st.Backups, logs.String(), c.Primary.Out)
}

// RequireConverged takes a barrier, waits for every backup to apply it
// and compares each backup with the primary byte for byte.
func (c *Cluster) RequireConverged() {
	c.t.Helper()
	c.WaitApplied(c.Barrier())
	want := Snapshot(c.t, c.Vol)
	for i, b := range c.Backups {
		RequireEqual(c.t, want, Snapshot(c.t, b.Vol), fmt.Sprintf("backup %d vs primary", i))
	}
}

// Workload runs the randomized concurrent workload against the volume
// with barriers at random moments; midway runs at half time.
func (c *Cluster) Workload(seed uint64, steps int, midway func()) {
	NewWorkload(c.Vol, false).Run(seed, 3, steps, func() { c.Barrier() }, midway)
}

// NewBackup starts a lone `pbfs backup` on an empty directory of its own,
// with TestToken, for a primary the test starts some other way (a volume
// driver's mount, say); it stops in Cleanup.
func NewBackup(t testing.TB) *BackupProc {
	dir := t.TempDir()
	b := &BackupProc{Addr: FreeAddr(t), Vol: filepath.Join(dir, "b"), Jdir: filepath.Join(dir, "jb")}
	if err := os.Mkdir(b.Vol, 0o755); err != nil {
		t.Fatal(err)
	}
	(&Cluster{t: t, Dir: dir}).StartBackup(b)
	return b
}
