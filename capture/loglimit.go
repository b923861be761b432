package capture

import (
	"sync"
	"time"
)

// logEvery is how often one kind of repeating backing error is logged.
const logEvery = 10 * time.Second

// logLimiter lets one log line per kind through every logEvery and counts
// the ones it held back, so that a service that hits EMFILE in a loop
// (hundreds of failed opens a second) gets a line saying so, not a log
// that buries everything else and fills the disk. The metric still counts
// every error.
type logLimiter struct {
	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

// allow reports whether a line of kind may be logged at now, and how many
// lines of that kind were held back since the last one that was.
func (l *logLimiter) allow(kind string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last, l.held = map[string]time.Time{}, map[string]int{}
	}
	if last, ok := l.last[kind]; ok && now.Sub(last) < logEvery {
		l.held[kind]++
		return false, 0
	}
	l.last[kind] = now
	held := l.held[kind]
	delete(l.held, kind)
	return true, held
}
