// Package events is a process's stream of state changes (role, members,
// resyncs, fences, degradations) as JSON lines an operator can watch,
// as drbdsetup events2 prints DRBD's: `pbfs events`, the control socket's
// /v1/events and the admin port's /events.
package events

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"
)

// Event is one state change.
type Event struct {
	Time time.Time `json:"time"`
	// Kind names the change: role, backup-up, backup-down, ... (the
	// Kind* constants).
	Kind string `json:"event"`
	// Attrs say what changed: the backup, the seq, the reason.
	Attrs map[string]any `json:"attrs,omitempty"`
}

// Kinds of events.
const (
	KindRole           = "role"            // role: primary, backup, none
	KindBackupUp       = "backup-up"       // a primary's stream to a backup is up
	KindBackupDown     = "backup-down"     // and went down (err, remedy)
	KindBackupAdded    = "backup-added"    // pbfs member add, or a node joining
	KindBackupRemoved  = "backup-removed"  // pbfs member remove
	KindDegraded       = "degraded"        // a backup left the ack set (--degrade-after)
	KindRejoined       = "rejoined"        // and is back in it
	KindResyncStarted  = "resync-started"  // a resync of a backup began (kind: full, targeted)
	KindResyncDone     = "resync-done"     // and ended (bytes, took)
	KindDeposed        = "deposed"         // a backup refused this primary's epoch
	KindPrimaryUp      = "primary-up"      // a backup's primary connected (epoch)
	KindPrimaryDown    = "primary-down"    // its stream ended
	KindFenced         = "fenced"          // a backup fenced an ended term
	KindStalled        = "stalled"         // a backup cannot apply what it holds
	KindApplyBlocked   = "apply-blocked"   // a batch it retries (seq, why)
	KindApplyUnblocked = "apply-unblocked" // applies again
	KindLost           = "lost"            // a watcher fell behind: n events it did not get
)

// history is how many past events a new watcher gets first.
const history = 256

// watcherQueue bounds the events waiting for one watcher; a watcher that
// falls further behind is told how many it lost.
const watcherQueue = 1024

// Bus keeps the recent events and hands new ones to its watchers. A nil
// *Bus takes events and drops them.
type Bus struct {
	mu       sync.Mutex
	past     []Event
	watchers map[chan Event]*int // each watcher's count of events lost
}

// New returns an empty Bus.
func New() *Bus { return &Bus{watchers: map[chan Event]*int{}} }

// Emit records an event of kind with attrs as key, value pairs.
func (b *Bus) Emit(kind string, attrs ...any) {
	if b == nil {
		return
	}
	e := Event{Time: time.Now().UTC(), Kind: kind}
	if len(attrs) > 1 {
		e.Attrs = map[string]any{}
		for i := 0; i+1 < len(attrs); i += 2 {
			if k, ok := attrs[i].(string); ok {
				e.Attrs[k] = attrs[i+1]
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.past) == history {
		b.past = append(b.past[:0], b.past[1:]...)
	}
	b.past = append(b.past, e)
	for ch, lost := range b.watchers {
		select {
		case ch <- e:
		default:
			*lost++
		}
	}
}

// Watch returns the recent events (all of them if past) and then every
// new one, until stop is called.
func (b *Bus) Watch(past bool) (<-chan Event, func()) {
	ch := make(chan Event, watcherQueue+history)
	lost := new(int)
	b.mu.Lock()
	if past {
		for _, e := range b.past {
			ch <- e
		}
	}
	b.watchers[ch] = lost
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.watchers, ch)
		b.mu.Unlock()
	}
}

// lostSince returns and clears how many events ch could not take.
func (b *Bus) lostSince(ch <-chan Event) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for c, lost := range b.watchers {
		if (<-chan Event)(c) == ch {
			n := *lost
			*lost = 0
			return n
		}
	}
	return 0
}

// ServeHTTP streams the events as JSON lines: the recent ones unless the
// query says past=0, then each new one as it comes, until the client
// goes.
func (b *Bus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ch, stop := b.Watch(r.URL.Query().Get("past") != "0")
	defer stop()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case e := <-ch:
			if n := b.lostSince(ch); n > 0 {
				enc.Encode(Event{Time: time.Now().UTC(), Kind: KindLost, Attrs: map[string]any{"events": n}})
			}
			if enc.Encode(e) != nil {
				return
			}
			flush()
		}
	}
}

// Follow calls fn with each line of a stream ServeHTTP writes, until the
// stream ends (io.EOF: nil) or fn fails.
func Follow(r io.Reader, fn func(line []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if err := fn(sc.Bytes()); err != nil {
			return err
		}
	}
	return sc.Err()
}
