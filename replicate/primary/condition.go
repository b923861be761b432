package primary

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What an operator needs to know of one backup, in words: why it is not
// acknowledging (unreachable since when and why, refused and why,
// resyncing how far, stale, stalled, degraded, joining) or how far behind
// it is. It goes into a failed barrier's error, the mount's status and
// `pbfs status`.

// downState is why a backup's stream is down, and since when.
type downState struct {
	err     string
	refused bool // the backup answered and said no (a Reject, a wrong token)
	since   time.Time
}

// shipperState is the part of a Shipper's state only describe reads.
type shipperState struct {
	down          atomic.Pointer[downState]
	degradedSince atomic.Int64 // unix ns when the degrade policy dropped it; 0 while in the ack set
	staleSince    atomic.Int64 // unix ns when its history was found to differ; 0 while it does not
	resyncing     atomic.Bool
	resyncsDone   atomic.Uint64 // resyncs finished since the mount started
	resyncProg    resyncProgress
	// blocked: the batch the backup reports it cannot apply, and why in
	// its words (Ack.apply_blocked); nil while it applies.
	blocked atomic.Pointer[blockedReport]
}

// blockedReport is a backup's report of a batch it cannot apply.
type blockedReport struct {
	seq   uint64
	words string
}

// noteBlocked keeps what an ack says of a batch the backup cannot apply.
func (s *Shipper) noteBlocked(seq uint64, words string) {
	old := s.blocked.Load()
	switch {
	case words == "" && old != nil:
		s.blocked.Store(nil)
		s.m.applyBlocked.WithLabelValues(s.addr).Set(0)
		s.log.Info("backup applies again", "seq", old.seq)
	case words != "" && (old == nil || old.seq != seq):
		s.log.Warn("backup cannot apply a batch; it keeps it and retries, and its volume lags until it goes in", "seq", seq, "state", words)
		fallthrough
	case words != "":
		s.blocked.Store(&blockedReport{seq: seq, words: words})
		s.m.applyBlocked.WithLabelValues(s.addr).Set(1)
	}
}

// streamDown records why the stream went down; the first error of an
// outage keeps its time.
func (st *shipperState) streamDown(err error) {
	msg := "stream ended"
	if err != nil {
		msg = err.Error()
	}
	since := time.Now()
	if d := st.down.Load(); d != nil {
		since = d.since
	}
	// FailedPrecondition: the backup refused, for its own state (a first
	// resync into a volume holding files, without --adopt).
	code := status.Code(err)
	refused := errors.Is(err, ErrRefused) || code == codes.Unauthenticated || code == codes.PermissionDenied || code == codes.FailedPrecondition
	st.down.Store(&downState{err: msg, refused: refused, since: since})
}

// setStale records whether the backup's history differs, and since when.
func (s *Shipper) setStale(v bool) {
	if v && !s.stale.Swap(true) {
		s.staleSince.Store(time.Now().UnixNano())
	} else if !v {
		s.stale.Store(false)
		s.staleSince.Store(0)
	}
}

// streamUp clears the outage.
func (st *shipperState) streamUp() { st.down.Store(nil) }

// describe says, in a few words, what state the backup is in for a
// barrier that waits for seq (0: none).
func (s *Shipper) describe(seq uint64) string {
	var parts []string
	switch {
	case s.resyncing.Load():
		if p := s.resyncProg.snapshot(); p != nil {
			parts = append(parts, "resyncing "+p.String())
		} else {
			parts = append(parts, "resyncing")
		}
	case !s.up.Load():
		if d := s.down.Load(); d != nil {
			what := "unreachable"
			if d.refused {
				what = "refused"
			}
			parts = append(parts, fmt.Sprintf("%s since %s (%s)", what, d.since.Format("15:04:05"), d.err))
		} else {
			parts = append(parts, "connecting")
		}
	}
	if s.stalled.Load() {
		parts = append(parts, "stalled: cannot apply what it holds, needs a resync")
	} else if s.stale.Load() {
		since := ""
		if t := s.staleSince.Load(); t > 0 {
			since = " since " + time.Unix(0, t).Format("15:04:05")
		}
		parts = append(parts, "stale"+since+": needs a resync (its journal does not continue this primary's history)")
	}
	if bl := s.blocked.Load(); bl != nil {
		parts = append(parts, bl.words)
	}
	if s.degraded.Load() {
		parts = append(parts, "degraded: out of the ack set")
	}
	if s.joining.Load() {
		parts = append(parts, "joining: out of the ack set until caught up")
	}
	acked := s.acked.Load()
	if seq > 0 && acked < seq {
		parts = append(parts, fmt.Sprintf("holds seq %d of %d", acked, seq))
	} else if len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("up, holds seq %d", acked))
	}
	if s.up.Load() && s.overGRPC.Load() {
		// Works, a little slower: say so, for the end of a rolling upgrade.
		parts = append(parts, "streaming over gRPC: the backup runs a pbfs from before raw streams")
	}
	return strings.Join(parts, ", ")
}
