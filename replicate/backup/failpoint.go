//go:build failpoints

package backup

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Failpoints let tests crash a real backup process at an exact point, as
// the journal's failpoints make its disk fail (see journal/failpoint.go).
// PBFS_FAILPOINT_APPLY_KILL=before:N (or after:N) kills the process with
// SIGKILL at its N-th apply mark, before (or after) the mark is written:
// before, the op the last mark names is done and the mark still says it
// is next; after, the mark names an op that has not run. A kill -9 from
// outside lands at either only by luck.
var (
	killAtMark     int64
	killAfterWrite bool
	marksWritten   atomic.Int64
)

func init() {
	when, n, ok := strings.Cut(os.Getenv("PBFS_FAILPOINT_APPLY_KILL"), ":")
	if k, err := strconv.ParseInt(n, 10, 64); ok && err == nil && k > 0 && (when == "before" || when == "after") {
		killAtMark, killAfterWrite = k, when == "after"
	}
}

// nextMark counts the apply marks this process writes.
func nextMark() int64 { return marksWritten.Add(1) }

// markFailpoint kills the process if the failpoint is due at this mark;
// written says whether the mark has been written yet.
func markFailpoint(n int64, written bool) {
	if killAtMark != 0 && n == killAtMark && written == killAfterWrite {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// testHookAcked, set by tests built with the failpoints, runs in a
// stream's store loop after the ack that follows each store.
var testHookAcked func(*Backup)

func ackedFailpoint(b *Backup) {
	if testHookAcked != nil {
		testHookAcked(b)
	}
}
