package fstest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/control"
)

var (
	binMu    sync.Mutex
	binPaths = map[string]string{}
)

// Main runs a package's tests and then removes the binaries Build made
// for them (they outlive any one test, so no t.TempDir can hold them):
//
//	func TestMain(m *testing.M) { os.Exit(fstest.Main(m)) }
func Main(m *testing.M) int {
	tmp, _ := os.Stat(os.TempDir())
	code := m.Run()
	if err := sameMode(os.TempDir(), tmp); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	binMu.Lock()
	defer binMu.Unlock()
	for pkg, path := range binPaths {
		os.RemoveAll(filepath.Dir(path))
		delete(binPaths, pkg)
	}
	return code
}

// sameMode restores the mode of the machine's temporary directory dir, as
// before was before the tests ran, and says so if a test changed it (one
// set /tmp to 0755: other users could no longer make temporary files).
func sameMode(dir string, before os.FileInfo) error {
	now, err := os.Stat(dir)
	if before == nil || err != nil || now.Mode() == before.Mode() {
		return nil
	}
	os.Chmod(dir, before.Mode())
	return fmt.Errorf("a test changed the mode of %s from %v to %v (restored)", dir, before.Mode(), now.Mode())
}

// Binary builds the pbfs command once per test binary and returns its path.
//
// Tests serve their mounts from this separate process, never in-process: a
// test process that also serves the mount can deadlock, because opening a
// file registers it with Go's netpoller, whose epoll_ctl sends a FUSE POLL
// while holding a P, and a stop-the-world GC then waits for that P while the
// goroutine that would answer the POLL waits for the world.
func Binary(t testing.TB) string {
	t.Helper()
	return Build(t, "github.com/pbfs/pbfs/cmd/pbfs")
}

// Build builds the command pkg once per test binary (with -race when the
// tests run with it, and with failpoints) and returns its path. The package's TestMain should
// call Main, which removes it afterwards.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if p, ok := binPaths[pkg]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "pbfs-test-bin")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, filepath.Base(pkg))
	// The tests' binaries have failpoints (PBFS_FAILPOINT_*); release
	// builds do not.
	args := []string{"build", "-tags", "failpoints", "-o", path}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	binPaths[pkg] = path
	return path
}

// Proc is a pbfs process a test started.
type Proc struct {
	t          testing.TB
	Cmd        *exec.Cmd
	Out        *Buffer
	Vol        string
	Journal    string
	fdsAtStart int
	skipped    string // why the journal is not verified at Stop (SkipChecks)

	clientOnce sync.Once
	client     *control.Client
	clientErr  error
}

// fds lists the targets of the process's open descriptors.
func (p *Proc) fds() []string {
	dir := fmt.Sprintf("/proc/%d/fd", p.Cmd.Process.Pid)
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, target)
		}
	}
	return out
}

// checkFds fails the test if the daemon still holds a descriptor of a
// file of the volume once the test closed its own (the kernel releases
// them asynchronously: allow it a moment), or holds many more descriptors
// than when it came up: a leak, one descriptor per operation, would run a
// long-lived daemon out of them.
func (p *Proc) checkFds() {
	var leaked []string
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		leaked = leaked[:0]
		for _, target := range p.fds() {
			if strings.HasPrefix(target, p.Vol+"/") {
				leaked = append(leaked, target)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(leaked) > 0 {
		p.t.Errorf("the daemon still holds %d descriptors of volume files after the test closed its own: %v", len(leaked), leaked)
	}
	if n := len(p.fds()); n > p.fdsAtStart+32 {
		p.t.Errorf("the daemon holds %d descriptors, %d when it came up: a leak? %v", n, p.fdsAtStart, p.fds())
	}
}

// StartMount runs `pbfs mount` over vol (args go before vol; prefix, such
// as prlimit, before pbfs) and waits until it answers a barrier. The mount
// is stopped in Cleanup.
func StartMount(t testing.TB, prefix []string, vol, journalDir string, args ...string) *Proc {
	t.Helper()
	return startPrimary(t, prefix, "mount", vol, journalDir, args...)
}

// StartPromote runs `pbfs promote` (a stopped backup's journal and volume
// become a primary) and waits until it answers, as StartMount does.
func StartPromote(t testing.TB, vol, journalDir string, args ...string) *Proc {
	t.Helper()
	return startPrimary(t, nil, "promote", vol, journalDir, args...)
}

func startPrimary(t testing.TB, prefix []string, cmd, vol, journalDir string, args ...string) *Proc {
	t.Helper()
	RequireFUSE(t)
	argv := append(append([]string{}, prefix...), Binary(t), cmd, "--journal", journalDir)
	argv = append(append(argv, args...), vol)
	p := &Proc{t: t, Cmd: exec.Command(argv[0], argv[1:]...), Out: &Buffer{}, Vol: vol, Journal: journalDir}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(args, "--backing") {
		noteDaemon(t, vol, p.Cmd.Process.Pid)
	}
	t.Cleanup(func() { p.Stop() })
	for i := 0; i < 400; i++ {
		if Mounted(vol) {
			if _, err := p.Client().Status(t.Context()); err == nil {
				p.fdsAtStart = len(p.fds())
				return p
			}
		}
		if p.Cmd.ProcessState != nil {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("pbfs %s did not come up:\n%s", cmd, p.Out)
	return nil
}

// Barrier takes a barrier through the mount's control socket and fails
// the test, with the mount's log, if it does not return within 30 s.
func (p *Proc) Barrier() uint64 {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seq, err := p.Client().Barrier(ctx)
	if err != nil {
		p.t.Fatalf("barrier: %v\n%s", err, p.Out)
	}
	return seq
}

// Client returns a control-socket client for the mount, one per Proc: a
// new client per call would leave its connection open in the daemon.
func (p *Proc) Client() *control.Client {
	p.clientOnce.Do(func() { p.client, p.clientErr = control.Dial(p.Journal) })
	if p.clientErr != nil {
		p.t.Fatal(p.clientErr)
	}
	return p.client
}

// Stop verifies the journal the mount serves (unless the test failed or
// called SkipChecks), sends SIGINT and waits; a process that does not
// stop is killed and its mount detached, and the test fails.
func (p *Proc) Stop() {
	// A killed process leaves a dead mount behind (and, on a killed
	// backup's copy, the copy's guard); whatever happened, the test leaves
	// no mount.
	defer DetachAll(p.Vol)
	if p.Cmd.ProcessState != nil {
		return
	}
	if p.fdsAtStart > 0 {
		// Invariant 6 on every test mount: the journal it served
		// verifies, batch by batch, before it stops.
		if !p.t.Failed() && p.skipped == "" {
			verifyJournal(p.t, p.Client(), p.Journal)
		}
		if p.client != nil {
			p.client.Close()
		}
		p.checkFds()
	}
	p.Cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- p.Cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			p.t.Errorf("pbfs exited: %v\n%s", err, p.Out)
		}
	case <-time.After(20 * time.Second):
		p.Cmd.Process.Kill()
		<-done
		syscall.Unmount(p.Vol, syscall.MNT_DETACH)
		p.t.Errorf("pbfs did not stop on SIGINT:\n%s", p.Out)
	}
}

// SkipChecks turns off the check of the journal when the process stops,
// for a test that damages it on purpose.
func (p *Proc) SkipChecks(t testing.TB, reason string) {
	t.Helper()
	p.skipped = reason
	t.Logf("journal check at stop off: %s", reason)
}

// Kill kills the process with SIGKILL, as a crash would (KillHard).
func (p *Proc) Kill() {
	KillHard(p.Cmd.Process.Pid)
	p.Cmd.Wait()
}

// DetachAll lazily unmounts everything mounted at dir: a dead pbfs mount,
// a copy's nosuid,nodev guard (apply.GuardCopy) a killed backup left.
func DetachAll(dir string) {
	for i := 0; i < 16 && syscall.Unmount(dir, syscall.MNT_DETACH) == nil; i++ {
	}
}

// Mounted reports whether a pbfs mount is at dir.
func Mounted(dir string) bool {
	data, _ := os.ReadFile("/proc/mounts")
	return strings.Contains(string(data), " "+dir+" fuse.pbfs ")
}

// Buffer is an output buffer a process and a test can share.
type Buffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// Counter sums the samples of a Prometheus counter whose labels contain
// label, from the mount's /metrics.
func (p *Proc) Counter(name, label string) float64 {
	p.t.Helper()
	text, err := p.Client().Metrics(context.Background())
	if err != nil {
		p.t.Fatal(err)
	}
	return MetricSum(text, name, label)
}

// MetricSum sums the samples of metric name whose labels contain label,
// in Prometheus text exposition.
func MetricSum(text, name, label string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if (strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ")) && strings.Contains(line, label) {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			sum += v
		}
	}
	return sum
}

// ScrapeSum fetches a Prometheus /metrics URL and sums like MetricSum.
func ScrapeSum(t testing.TB, url, name, label string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return MetricSum(string(text), name, label)
}

// StopProcess sends sig to cmd's process and waits up to wait for it to
// exit, then kills it. It reports whether the process exited on its own.
func StopProcess(cmd *exec.Cmd, sig os.Signal, wait time.Duration) bool {
	if cmd == nil || cmd.Process == nil || cmd.ProcessState != nil {
		return true
	}
	cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(wait):
		cmd.Process.Kill()
		<-done
		return false
	}
}
