package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// errBodyTimeout is a request body that did not arrive in its time.
	errBodyTimeout = errors.New("request body too slow")
	// errEvicted is a request body cut off to admit another client.
	errEvicted = errors.New("request body cut off to admit another client")
)

// bufferBody reads the client's whole request body before the request
// takes an upstream slot, as nginx's proxy_request_buffering does, and
// puts it back as a body of known length. Streamed as it arrived, a body
// trickled at a byte a second held a slot for as long, and as many such
// uploads as the pool holds kept every other request out. The body gets
// its time (bodyReader) and at most max-body bytes. It answers the
// request itself, and reports false, when the body cannot be had.
func (s *state) bufferBody(w http.ResponseWriter, r *http.Request) (*keepBody, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	if r.ContentLength > s.cfg.MaxBody {
		// Before a byte of it is read: no 100 Continue, nothing spooled.
		// The server reads a little of it before it closes (below), in
		// the time a body has.
		http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
		s.refuseBody(w, r, "too-large", errBodyTooLarge)
		return nil, false
	}
	br := &bodyReader{r: r.Body, rc: http.NewResponseController(w), start: time.Now(), timeout: s.cfg.BodyTimeout, rate: s.cfg.BodyMinRate}
	conn, _ := r.Context().Value(connKey{}).(*countedClient)
	if conn != nil {
		conn.setPhase(phaseBody, br)
	}
	data, n, err := s.spool.request(br, s.cfg.MaxBody)
	br.finish(err == nil)
	if conn != nil {
		conn.setPhase(phaseBusy, nil)
	}
	var spooled *spoolError
	switch {
	case err == nil:
	case errors.Is(err, errBodyTooLarge):
		s.refuseBody(w, r, "too-large", err)
		return nil, false
	case errors.Is(err, errBodyTimeout), errors.Is(err, errEvicted):
		// Checked before the context: the server takes a failed read
		// for a client gone and cancels it, but this one is still there.
		s.refuseBody(w, r, "timeout", err)
		return nil, false
	case r.Context().Err() != nil:
		clientLeft()
	case errors.As(err, &spooled):
		s.spoolRefused(w, r, spooled)
		return nil, false
	default:
		s.refuseBody(w, r, "unreadable", err)
		return nil, false
	}
	// The body must survive a dial that failed (no descriptors or ports,
	// or the service not listening yet): the transport closes it, but
	// read nothing of it.
	body := &keepBody{ReadCloser: data}
	r.Body, r.ContentLength = body, n
	r.TransferEncoding = nil
	if len(r.Trailer) > 0 { // trailers need the chunked encoding
		r.ContentLength, r.TransferEncoding = -1, []string{"chunked"}
	}
	// The client has had its 100 Continue (Go's server sends it at the
	// first read); the service's own would reach it as a second one.
	r.Header.Del("Expect")
	return body, true
}

// refuseBody answers a request whose body the proxy will not take: 413
// past max-body, 408 too slow, 400 unreadable. The connection closes.
// Past max-body, the server first reads up to 256 KiB more of the body
// (within the body's deadline) and waits half a second after the answer:
// closed at once, with the client still sending, the connection was
// reset and the client lost the 413. A slow or broken body gets no such
// grace.
func (s *state) refuseBody(w http.ResponseWriter, r *http.Request, reason string, err error) {
	s.m.bodyErrors.WithLabelValues(reason).Inc()
	s.limited.warn("body-"+reason, "request body refused", "reason", reason, "method", r.Method, "path", r.URL.Path, "err", err)
	if reason != "too-large" {
		http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	w.Header().Set("Connection", "close")
	switch {
	case reason == "too-large":
		http.Error(w, fmt.Sprintf("pbfs proxy: the request body is larger than max-body (%d bytes); nothing reached the service", s.cfg.MaxBody), http.StatusRequestEntityTooLarge)
	case errors.Is(err, errEvicted):
		http.Error(w, "pbfs proxy: every connection was taken and this request body arrived the slowest, so it was cut off; nothing reached the service, retry later", http.StatusRequestTimeout)
	case reason == "timeout":
		http.Error(w, fmt.Sprintf("pbfs proxy: the request body did not arrive in time (body-timeout %v, extended a second for every %d bytes, body-min-rate); nothing reached the service", s.cfg.BodyTimeout, s.cfg.BodyMinRate), http.StatusRequestTimeout)
	default:
		http.Error(w, "pbfs proxy: the request body could not be read: "+err.Error(), http.StatusBadRequest)
	}
}

// spoolRefused answers a request whose body could not be kept.
func (s *state) spoolRefused(w http.ResponseWriter, r *http.Request, spooled *spoolError) {
	reason, remedy := "spool", "the proxy's temporary directory (TMPDIR) failed"
	if errors.Is(spooled, errSpoolFull) {
		reason, remedy = "spool-full", fmt.Sprintf("raise spool-disk (%d bytes, half of it for request bodies) if this is the usual load", s.cfg.SpoolDisk)
	}
	s.m.shed.WithLabelValues(reason).Inc()
	s.limited.warn(reason, "request refused: cannot spool its body", "method", r.Method, "path", r.URL.Path, "err", spooled.err)
	w.Header().Set("Retry-After", "1")
	http.Error(w, fmt.Sprintf("pbfs proxy: cannot keep the request body (%v; %s); nothing reached the service, retry later", spooled.err, remedy), http.StatusServiceUnavailable)
}

// keepBody ignores the transport's Close, so a request whose dial failed
// can be sent again; ServeHTTP closes the spooled body.
type keepBody struct{ io.ReadCloser }

func (*keepBody) Close() error { return nil }

// bodyReader reads a request body within its time: body-timeout after it
// began, plus a second for every body-min-rate bytes that arrived (the
// rule of Apache's mod_reqtimeout): a steady upload takes as long as it
// needs, a trickle is cut off. Cut off early (evict), it fails at once.
type bodyReader struct {
	r       io.Reader
	rc      *http.ResponseController
	start   time.Time
	timeout time.Duration
	rate    int64
	n       atomic.Int64 // bytes arrived, for the choice of a connection to cut off

	mu       sync.Mutex
	until    time.Time // the read deadline last set
	evicted  bool
	finished bool
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if err := b.extend(); err != nil {
		return 0, err
	}
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		b.mu.Lock()
		evicted := b.evicted
		b.mu.Unlock()
		if evicted {
			return n, errEvicted
		}
		return n, fmt.Errorf("%w: %d bytes in %v", errBodyTimeout, b.n.Load(), time.Since(b.start).Round(time.Millisecond))
	}
	return n, err
}

// extend moves the read deadline to where the body's time ends now, once
// that is a quarter of body-timeout later than the deadline set: not a
// timer update on every read.
func (b *bodyReader) extend() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.evicted {
		return errEvicted
	}
	end := b.start.Add(b.timeout)
	if b.rate > 0 {
		end = end.Add(time.Duration(min(b.n.Load()/b.rate, 1<<30)) * time.Second)
	}
	if !b.until.IsZero() && end.Sub(b.until) < b.timeout/4 {
		return nil
	}
	b.until = end
	b.rc.SetReadDeadline(end)
	return nil
}

// finish ends the body's time. A body that arrived whole lifts its
// deadline: the server reads on in the background (to notice a client
// that leaves) with the deadline the body had.
func (b *bodyReader) finish(whole bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.finished = true
	if whole && !b.until.IsZero() {
		b.rc.SetReadDeadline(time.Time{})
	}
}

// evict ends the body's time now; false if it had ended already.
func (b *bodyReader) evict() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished || b.evicted {
		return false
	}
	b.evicted = true
	b.rc.SetReadDeadline(time.Now())
	return true
}

// arrivalRate is the bytes a second the body arrived at so far.
func (b *bodyReader) arrivalRate(now time.Time) float64 {
	return float64(b.n.Load()) / max(now.Sub(b.start).Seconds(), 1e-3)
}
