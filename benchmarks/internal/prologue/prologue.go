// Package prologue is what every benchmark program does before it
// measures and after: it checks the machine and the work directory, makes
// the run's directory and removes or keeps it, finds or builds the pbfs
// binary under test, names the report's file, and says how the program
// ended.
package prologue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
)

// Run is one run of a benchmark program: its signal context and its own
// directory under the work directory.
type Run struct {
	Name string          // the program, as its messages start ("replicate")
	Ctx  context.Context // ends on SIGINT or SIGTERM
	Dir  string
	stop context.CancelFunc
}

// Begin checks /dev/fuse and the work directory (Workdir), makes the run's
// directory there (prefix followed by random characters) and starts
// watching for SIGINT and SIGTERM. End undoes it.
func Begin(name, workdir, prefix string) (*Run, error) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("no /dev/fuse: %w", err)
	}
	if _, err := Workdir(workdir); err != nil {
		return nil, err
	}
	if st, err := os.ReadFile("/proc/self/status"); err == nil && sigIgnored(string(st), syscall.SIGINT) {
		fmt.Fprintf(os.Stderr, "%s: started with SIGINT ignored (a background job of a non-interactive shell?): stop it with SIGTERM\n", name)
	}
	dir, err := os.MkdirTemp(workdir, prefix)
	if err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	r := &Run{Name: name, Dir: dir}
	r.Ctx, r.stop = signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	return r, nil
}

// End detaches the mounts left under the run's directory (which is an
// error, added to *err), then keeps the directory, saying so, when *err is
// set or keep is; otherwise it removes it.
func (r *Run) End(err *error, keep bool) {
	r.stop()
	if left := benchproc.MountsUnder(r.Dir); len(left) > 0 {
		for _, m := range left {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
		*err = errors.Join(*err, fmt.Errorf("mounts left behind (now detached): %v", left))
	}
	if *err != nil || keep {
		fmt.Fprintf(os.Stderr, "%s: kept %s\n", r.Name, r.Dir)
	} else {
		os.RemoveAll(r.Dir)
	}
}

// Binary is the pbfs binary under test: bin when given (pinned), else one
// built from this module into the run's directory. It returns the commit
// line of the report: the tree's, or a pinned binary's note.
func (r *Run) Binary(bin string) (path, commit string, err error) {
	commit = benchproc.Commit()
	if bin != "" {
		return bin, "(pinned binary " + benchproc.ShownPath(bin) + "; tree now at " + commit + ")", nil
	}
	path = filepath.Join(r.Dir, "pbfs")
	if out, err := exec.Command("go", "build", "-o", path, "github.com/pbfs/pbfs/cmd/pbfs").CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("build pbfs: %v\n%s", err, out)
	}
	return path, commit, nil
}

// Token is a fresh replication token.
func Token() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// WriteReport writes text to resultsDir as NAME-<UTC date of start>.md
// and says where on stderr; it returns the path.
func WriteReport(resultsDir, name string, start time.Time, text string) (string, error) {
	if err := os.MkdirAll(resultsDir, 0o755); err != nil {
		return "", fmt.Errorf("write report: %w", err)
	}
	p := filepath.Join(resultsDir, Stem(name, start)+".md")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		return "", fmt.Errorf("write report: %w", err)
	}
	fmt.Fprintf(os.Stderr, "%s: report written to %s\n", name, p)
	return p, nil
}

// Stem is a report's file name without its extension: NAME-<UTC date>.
func Stem(name string, start time.Time) string {
	return name + "-" + start.UTC().Format("2006-01-02-150405")
}

// Exit ends the program: with 1 and "NAME: FAILED: err" when err is set.
func Exit(name string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: FAILED: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Usage ends the program with 2 and "NAME: err" for bad flags.
func Usage(name string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	os.Exit(2)
}

// sigIgnored reads the SigIgn mask of /proc/self/status.
func sigIgnored(status string, sig syscall.Signal) bool {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}
