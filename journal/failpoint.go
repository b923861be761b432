//go:build failpoints

package journal

import (
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// Failpoints let tests make the journal fail as a full disk would, in a
// real pbfs process, as etcd's bbolt tests do. PBFS_FAILPOINT_APPEND=N makes
// the first N appends of the process fail with ENOSPC.
var appendFailures atomic.Int64

func init() {
	if n, err := strconv.Atoi(os.Getenv("PBFS_FAILPOINT_APPEND")); err == nil && n > 0 {
		appendFailures.Store(int64(n))
	}
}

// failAppend reports an injected failure, if one is due.
func failAppend() error {
	if appendFailures.Load() > 0 && appendFailures.Add(-1) >= 0 {
		return &os.PathError{Op: "append (failpoint)", Path: "journal", Err: syscall.ENOSPC}
	}
	return nil
}

// PBFS_FAILPOINT_APPEND_DELAY (a duration) makes every AppendEncoded (a
// backup storing what it received) take that much longer, as a slow disk
// would: tests of what an ack means use it.
var appendDelayBy, _ = time.ParseDuration(os.Getenv("PBFS_FAILPOINT_APPEND_DELAY"))

func appendDelay() {
	if appendDelayBy > 0 {
		time.Sleep(appendDelayBy)
	}
}
