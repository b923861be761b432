//go:build failpoints

package fs

import (
	"os"
	"time"
)

// fenceDelay (PBFS_FAILPOINT_FENCE_DELAY, a duration) holds every fence's
// OPENDIR unanswered that long, for tests that kill the daemon meanwhile.
// Only in builds with -tags failpoints, as the tests build pbfs.
var fenceDelay, _ = time.ParseDuration(os.Getenv("PBFS_FAILPOINT_FENCE_DELAY"))

// truncateDelay (PBFS_FAILPOINT_TRUNCATE_DELAY, a duration) holds every
// truncating SETATTR that long before serving it, so that flush rounds
// find truncates in flight.
var truncateDelay, _ = time.ParseDuration(os.Getenv("PBFS_FAILPOINT_TRUNCATE_DELAY"))
