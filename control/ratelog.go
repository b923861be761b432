package control

import (
	"sync"
	"time"
)

// rateLog lets a repeated log line through at most once per interval,
// counting the ones it held back: a primary deposed while clients keep
// asking fails every barrier, hundreds a second, and one line a second
// says as much.
type rateLog struct {
	every time.Duration

	mu      sync.Mutex
	last    time.Time
	skipped int
}

// allow reports whether to log now, and how many were held back since the
// last line logged.
func (r *rateLog) allow(now time.Time) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && now.Sub(r.last) < r.every {
		r.skipped++
		return false, 0
	}
	skipped := r.skipped
	r.last, r.skipped = now, 0
	return true, skipped
}
