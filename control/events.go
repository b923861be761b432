package control

import (
	"context"
	"fmt"
	"net/http"

	"github.com/pbfs/pbfs/internal/events"
)

// Watchable is what a Backend that keeps a stream of its state changes
// offers: GET /v1/events streams them as JSON lines (events.Bus).
type Watchable interface {
	Events() *events.Bus
}

// serveEvents answers GET /v1/events: b's state changes as they happen,
// if it keeps them.
func serveEvents(b Backend) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		wb, ok := b.(Watchable)
		if !ok || wb.Events() == nil {
			http.Error(w, "this process keeps no events", http.StatusNotFound)
			return
		}
		wb.Events().ServeHTTP(w, r)
	}
}

// Events follows the process's state changes: fn gets each one as a JSON
// line (the recent ones first, if past), until ctx ends or fn fails.
func (c *Client) Events(ctx context.Context, past bool, fn func(line []byte) error) error {
	q := ""
	if !past {
		q = "?past=0"
	}
	resp, err := c.do(ctx, http.MethodGet, "/v1/events"+q)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	defer resp.Body.Close()
	err = events.Follow(resp.Body, fn)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	return fmt.Errorf("events: the process closed the stream (it stopped?)")
}
