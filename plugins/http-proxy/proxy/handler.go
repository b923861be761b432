package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strconv"
	"sync"
	"time"

	"github.com/pbfs/pbfs/plugins/sdk"
)

// state is a started proxy.
type state struct {
	cfg       Config
	host      sdk.Host
	log       *slog.Logger
	limited   *logLimiter
	m         *metrics
	transport *http.Transport
	rp        *httputil.ReverseProxy
	commit    *committer
	admit     slots  // max-inflight
	pool      *queue // upstream pool
	spool     *spooler
	gate      *upstreamGate
}

func newState(cfg Config, h sdk.Host, log *slog.Logger) *state {
	m := newMetrics()
	s := &state{cfg: cfg, host: h, log: log, limited: newLogLimiter(log), m: m,
		admit: make(slots, cfg.MaxInflight), pool: newQueue(cfg.Pool), gate: newGate(cfg.Upstream, log, m),
		spool: &spooler{mem: cfg.SpoolMemory, disk: cfg.SpoolDisk, gauge: m.spoolBytes}}
	s.transport = newTransport(cfg.Pool, cfg.UpstreamTimeout, m, s.limited)
	s.commit = &committer{barrier: h.Barrier, timeout: cfg.BarrierTimeout, inflight: cfg.Barriers, m: m}
	s.rp = newReverseProxy(s)
	return s
}

type ctxKey struct{}

// connKey finds the client connection (a *countedClient) in a request's
// context.
type connKey struct{}

// reqState travels with a request through the reverse proxy's hooks.
type reqState struct {
	dur     durability
	release func() // gives the upstream slot back; safe to call twice
	arrival time.Time
	redial  string   // why the dial failed, when the request may be sent again
	conn    net.Conn // the upstream connection the request got (httptrace)
}

// statusWriter records the status code for the requests metric, and
// gives every write idle to complete: a client that stops reading is cut
// off then, instead of holding its request, its admission and a spooled
// body (up to the response's size, on disk) for as long as it stays
// connected.
type statusWriter struct {
	http.ResponseWriter
	code  int
	idle  time.Duration
	until time.Time // the write deadline last set
}

func (w *statusWriter) WriteHeader(code int) {
	// An informational answer (100 Continue, 103 Early Hints) precedes
	// the final one, which is what the metric counts; 101 is final.
	if w.code == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.code = code
	}
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.extend()
	return w.ResponseWriter.Write(b)
}

// extend moves the connection's write deadline idle ahead, once a
// quarter of idle has passed since it last did: not a timer update on
// every 32 KiB a response is copied in.
func (w *statusWriter) extend() {
	if w.idle <= 0 {
		return
	}
	now := time.Now()
	if w.until.Sub(now) > w.idle*3/4 {
		return
	}
	w.until = now.Add(w.idle)
	http.NewResponseController(w.ResponseWriter).SetWriteDeadline(w.until)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *state) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &statusWriter{ResponseWriter: rw, idle: s.cfg.IdleTimeout}
	defer func() {
		if w.code != 0 {
			s.m.requests.WithLabelValues(strconv.Itoa(w.code/100) + "xx").Inc()
		}
	}()
	switch {
	case r.Method == http.MethodConnect:
		// A 200 to CONNECT means a tunnel is open; this proxy opens none.
		http.Error(w, "pbfs proxy: CONNECT is not supported", http.StatusMethodNotAllowed)
		return
	case r.ProtoMajor != 1:
		// HTTP/2 with prior knowledge ("PRI * HTTP/2.0"): not offered.
		http.Error(w, "pbfs proxy: HTTP/1.x only", http.StatusHTTPVersionNotSupported)
		return
	}
	if !s.admit.tryAcquire() {
		s.shed(w, "overloaded", "pbfs proxy: too many requests in flight, retry later")
		return
	}
	defer s.admit.release()
	s.m.inflight.Inc()
	defer s.m.inflight.Dec()
	body, ok := s.bufferBody(w, r)
	if !ok {
		return
	}
	if body != nil {
		defer body.ReadCloser.Close()
	}
	s.send(w, r, time.Now())
}

// send forwards r once it has an upstream slot and the service accepts
// connections. A request whose dial failed, so that nothing reached the
// service, is sent again: one refused (the service is not up) keeps its
// slot and waits for the service, one that found no descriptors or ports
// parks its slot and takes another.
func (s *state) send(w http.ResponseWriter, r *http.Request, arrival time.Time) {
	dur := s.cfg.Routes.of(r)
	for {
		if !s.pool.acquire(r.Context(), func() time.Time { return s.queueDeadline(arrival) }) {
			s.queueFailed(w, r)
			return
		}
		for {
			if !s.gate.wait(r.Context(), arrival.Add(s.cfg.UpstreamWait)) {
				s.pool.release()
				s.queueFailed(w, r)
				return
			}
			rs := s.forward(w, r, dur, arrival)
			if rs.redial == "" {
				return
			}
			if rs.redial != "refused" {
				break
			}
		}
		// The machine could not give the pool another connection:
		// park this slot for a while (the pool shrinks to what the
		// machine holds, and grows back slot by slot) and wait for one
		// whose connection exists.
		s.m.parked.Inc()
		go func() {
			time.Sleep(parkFor)
			s.m.parked.Dec()
			s.pool.release()
		}()
	}
}

// queueDeadline is how long a request that came at arrival may wait for
// an upstream slot: queue-timeout, or upstream-wait if the service has
// been down meanwhile (the queue is then the outage's, and drains in
// order once the service is up).
func (s *state) queueDeadline(arrival time.Time) time.Time {
	if s.gate.downSince(arrival) {
		return arrival.Add(max(s.cfg.QueueTimeout, s.cfg.UpstreamWait))
	}
	return arrival.Add(s.cfg.QueueTimeout)
}

// queueFailed answers a request that waited for a slot, or for the
// service, in vain.
func (s *state) queueFailed(w http.ResponseWriter, r *http.Request) {
	if r.Context().Err() != nil {
		clientLeft()
	}
	if s.gate.down.Load() {
		s.shed(w, "upstream-down", fmt.Sprintf("pbfs proxy: the service does not accept connections (waited up to upstream-wait, %v); nothing reached it, retry later", s.cfg.UpstreamWait))
		return
	}
	s.shed(w, "queue-timeout", "pbfs proxy: the service is busy, retry later")
}

// forward sends r upstream on the pool slot acquired for it. The slot is
// given back however the reverse proxy returns, a panic included (it
// aborts a streamed response whose copy fails with one): a slot lost
// there was lost for good, and after as many as the pool holds every
// request was shed. A request to dial again keeps its slot, for the
// caller to park.
func (s *state) forward(w http.ResponseWriter, r *http.Request, dur durability, arrival time.Time) *reqState {
	var once sync.Once
	rs := &reqState{dur: dur, release: func() { once.Do(s.pool.release) }, arrival: arrival}
	defer func() {
		if rs.redial == "" {
			rs.release()
		}
	}()
	ctx := context.WithValue(r.Context(), ctxKey{}, rs)
	if r.Header.Get("Upgrade") != "" {
		// Only a tunnel needs its connection (hold): no trace on the
		// requests that make up the load.
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { rs.conn = info.Conn }})
	}
	s.rp.ServeHTTP(w, r.WithContext(ctx))
	return rs
}

// clientLeft ends a request whose client is gone (or half-closed its
// side, which Go's server takes for gone) without an answer. Returning
// from the handler instead let net/http send an empty 200 OK in place of
// a held response: a client that half-closed after its request was told
// its write had succeeded before any barrier covered it.
func clientLeft() {
	panic(http.ErrAbortHandler)
}

// parkFor is how long a slot whose dial failed for want of fds or ports
// stays out of the pool.
const parkFor = time.Second

// errHeld is a response withheld because its barrier failed.
type errHeld struct{ err error }

func (e *errHeld) Error() string { return "barrier: " + e.err.Error() }
func (e *errHeld) Unwrap() error { return e.err }

// hold reads the whole upstream response, gives the upstream connection
// back, and waits for a barrier that started after that; only then may
// the response go to the client. Routes with durability none pass.
func (s *state) hold(resp *http.Response) error {
	rs, _ := resp.Request.Context().Value(ctxKey{}).(*reqState)
	if rs != nil && resp.StatusCode == http.StatusSwitchingProtocols {
		// A tunnel (WebSocket) is no request in the pool's sense and may
		// stay open for hours: each held a slot and a socket of the bound,
		// and as many as the pool holds shed every other request.
		if c, ok := rs.conn.(*countedConn); ok {
			c.leave()
		}
		rs.release()
		return nil
	}
	if rs == nil || rs.dur == durNone {
		return nil
	}
	body, n, err := s.spool.response(resp.Body)
	resp.Body.Close()
	rs.release()
	if err != nil {
		return err
	}
	start := time.Now()
	_, err = s.commit.wait(resp.Request.Context())
	s.m.holdSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		body.Close()
		return &errHeld{err: err}
	}
	resp.Body = body
	// The whole body is known now: say its length, unless the response
	// has none to say (HEAD, 204, 304 keep the upstream's headers) or
	// carries trailers, which need the chunked encoding.
	bodyless := resp.Request.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent ||
		resp.StatusCode == http.StatusNotModified
	if !bodyless && len(resp.Trailer) == 0 {
		resp.ContentLength = n
		resp.TransferEncoding = nil
		resp.Header.Set("Content-Length", strconv.FormatInt(n, 10))
	}
	return nil
}

// fail answers a request the proxy could not complete. It never retries:
// the upstream may already have acted on it.
func (s *state) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
		clientLeft() // nobody to answer; never an implicit 200
	}
	var held *errHeld
	var dial *dialError
	var spooled *spoolError
	switch {
	case errors.As(err, &spooled):
		reason := "spool"
		if errors.Is(spooled, errSpoolFull) {
			reason = "spool-full"
		}
		s.m.shed.WithLabelValues(reason).Inc()
		s.limited.warn(reason, "response withheld: cannot spool it", "method", r.Method, "path", r.URL.Path, "err", spooled.err)
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("pbfs proxy: the service handled this request, but the proxy could not keep its response to hold it (%v); the response is withheld. Check the result before retrying.", spooled.err), http.StatusServiceUnavailable)
	case errors.As(err, &held):
		s.limited.warn("barrier", "response withheld: barrier failed", "method", r.Method, "path", r.URL.Path, "err", held.err)
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("pbfs proxy: the service handled this request, but its effects could not be made durable on the backups (%v); the response is withheld. Check the result before retrying.", held.err), http.StatusServiceUnavailable)
	case errors.As(err, &dial) && dial.reason == "refused" && s.redial(r, dial.reason, s.cfg.UpstreamWait):
		// The service is not listening (yet): send waits for it.
		s.gate.markDown(s.cfg.UpstreamWait)
	case errors.As(err, &dial) && dial.reason == "refused":
		s.gate.markDown(s.cfg.UpstreamWait)
		s.queueFailed(w, r)
	case errors.As(err, &dial) && resourceExhausted(dial.reason) && s.redial(r, dial.reason, s.cfg.QueueTimeout):
		// Nothing reached the service; send tries another slot.
	case errors.As(err, &dial) && resourceExhausted(dial.reason):
		s.shed(w, "upstream-exhausted", "pbfs proxy: cannot open a connection to the service ("+dial.reason+"), retry later")
	default:
		s.limited.warn("upstream", "upstream request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		http.Error(w, "pbfs proxy: the service did not answer: "+err.Error(), http.StatusBadGateway)
	}
}

// redial marks r to be sent again after a failed dial, if it has not
// waited wait since it came.
func (s *state) redial(r *http.Request, reason string, wait time.Duration) bool {
	rs, _ := r.Context().Value(ctxKey{}).(*reqState)
	if rs == nil || time.Since(rs.arrival) >= wait {
		return false
	}
	rs.redial = reason
	return true
}

func (s *state) shed(w http.ResponseWriter, reason, msg string) {
	s.m.shed.WithLabelValues(reason).Inc()
	s.limited.warn("shed-"+reason, "request shed", "reason", reason)
	w.Header().Set("Retry-After", "1")
	http.Error(w, msg, http.StatusServiceUnavailable)
}

func (s *state) connState(nc net.Conn, cs http.ConnState) {
	c, _ := nc.(*countedClient)
	switch cs {
	case http.StateNew:
		s.m.clientConns.Inc()
	case http.StateClosed, http.StateHijacked:
		s.m.clientConns.Dec()
	}
	if c == nil {
		return
	}
	switch cs {
	case http.StateNew, http.StateIdle:
		c.setPhase(phaseWaiting, nil)
	case http.StateActive, http.StateHijacked:
		c.setPhase(phaseBusy, nil)
	}
}

// connContext puts the client connection in its requests' contexts.
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}
