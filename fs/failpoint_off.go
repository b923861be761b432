//go:build !failpoints

package fs

import "time"

// fenceDelay is a failpoint of test builds (failpoint.go).
const fenceDelay time.Duration = 0

// truncateDelay is a failpoint of test builds (failpoint.go).
const truncateDelay time.Duration = 0
