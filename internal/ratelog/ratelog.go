// Package ratelog lets a repeating log line through once per interval and
// counts the ones it held back, so that a flood (a peer opening
// connections in a loop, a service failing the same call hundreds of
// times a second) gets a line saying so, not a log that buries
// everything else and fills the disk. Metrics still count every event.
package ratelog

import (
	"sync"
	"time"
)

// Limiter lets one line of each kind through per interval.
type Limiter struct {
	every time.Duration

	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

// New returns a Limiter that lets a kind through once every every.
func New(every time.Duration) *Limiter {
	return &Limiter{every: every, last: map[string]time.Time{}, held: map[string]int{}}
}

// Allow reports whether a line of kind may be logged at now, and how many
// lines of that kind were held back since the last one that was.
func (l *Limiter) Allow(kind string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, ok := l.last[kind]; ok && now.Sub(last) < l.every {
		l.held[kind]++
		return false, 0
	}
	l.last[kind] = now
	held := l.held[kind]
	delete(l.held, kind)
	return true, held
}
