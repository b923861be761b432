package primary

import (
	"errors"
	"io"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/internal/events"
)

// A backup's stream that keeps failing is logged once per state change:
// when it goes down (with the remedy for what it failed with), when it
// fails for another reason, every stillDownEvery while it stays down (with
// how many attempts failed), and when it comes back (after how long). A
// backup down for two minutes used to log a warning every two seconds.

// stillDownEvery is how often a backup that stays down is logged again.
const stillDownEvery = 5 * time.Minute

// outage is one backup's stream outage, kept by its run goroutine.
type outage struct {
	since    time.Time // when the stream went down (zero: up)
	failures int       // attempts failed since
	logged   bool      // the outage's first line is out
	kind     string    // the remedy last logged ("": a transient failure)
	loggedAt time.Time
	// forceNoted: a resync an operator asked for failed to start, and
	// that was logged.
	forceNoted bool
}

// noteDown notes a failed attempt, and logs it if it changes what an
// operator was told. The end of a stream that was up (EOF, a reset) is
// not logged by itself: the next attempt says why the backup is down.
func (s *Shipper) noteDown(err error, retry time.Duration) {
	o := &s.outage
	now := time.Now()
	if o.failures == 0 {
		o.since = now
	}
	o.failures++
	msg := "stream ended"
	if err != nil {
		msg = err.Error()
	}
	kind := remedy(s.addr, err)
	args := []any{"err", msg, "retry_every", retry}
	if kind != "" {
		args = append(args, "remedy", kind)
	}
	more := []any{"down_for", now.Sub(o.since).Round(time.Second), "failures", o.failures}
	switch {
	case !o.logged && o.failures == 1 && streamEnded(err):
		return
	case !o.logged:
		s.log.Warn("replication stream down; retrying", args...)
		s.ev.Emit(events.KindBackupDown, "backup", s.addr, "err", msg, "remedy", kind)
	case kind != o.kind:
		s.log.Warn("replication stream still down, now for another reason", append(args, more...)...)
	case now.Sub(o.loggedAt) >= stillDownEvery:
		s.log.Warn("replication stream still down", append(args, more...)...)
	default:
		return
	}
	o.logged, o.kind, o.loggedAt = true, kind, now
}

// streamEnded reports whether err is the end of a stream that was up,
// which says nothing yet of why.
func streamEnded(err error) bool {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	msg := err.Error()
	return strings.HasSuffix(msg, "EOF") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe")
}

// upAgain ends an outage, returning the log attributes that say how long
// it lasted (none when there was none).
func (s *Shipper) upAgain() []any {
	o := &s.outage
	if o.failures == 0 {
		return nil
	}
	args := []any{"down_for", time.Since(o.since).Round(time.Millisecond), "failed_attempts", o.failures}
	*o = outage{}
	return args
}

// remedy says what an operator does about a stream to addr that failed
// with err ("" when it is transient or pbfs handles it: a resync, a
// deposed primary).
func remedy(addr string, err error) string {
	if err == nil {
		return ""
	}
	msg := strings.ToLower(err.Error())
	code := status.Code(err)
	switch {
	case errors.Is(err, ErrNeedsResync), errors.Is(err, ErrDeposed):
		return ""
	case strings.Contains(msg, "wrong token"), strings.Contains(msg, "no token"), code == codes.Unauthenticated:
		return "the backup refuses this primary's token: give both the same --token, --token-file or PBFS_TOKEN"
	case strings.Contains(msg, "serves volume"), strings.Contains(msg, "wrong_volume"):
		return "the backup at " + addr + " serves another volume: point --backup at this volume's backup, or start that backup on an empty directory and journal"
	case strings.Contains(msg, "holds files"), strings.Contains(msg, "--adopt"):
		return "the backup's directory holds files: start it with --adopt if they are a copy of this volume, or give it an empty directory"
	case errors.Is(err, syscall.ECONNREFUSED), strings.Contains(msg, "connection refused"):
		return "nothing listens at " + addr + ": start pbfs backup there, or correct --backup"
	case strings.Contains(msg, "certificate"), strings.Contains(msg, "tls"):
		return "TLS fails: each side needs a certificate the other's --tls-ca signed, and the name it is reached by"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ETIMEDOUT),
		strings.Contains(msg, "no route"), strings.Contains(msg, "i/o timeout"), strings.Contains(msg, "no such host"):
		return addr + " does not answer: check the address, the network, the firewall and that the machine is up"
	}
	return ""
}
