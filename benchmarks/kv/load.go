package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
)

// phase is one pass over the keys.
type phase struct {
	name     string
	ok       int64
	status5  int64            // 5xx answers (503 is the proxy or service shedding)
	status   int64            // other non-2xx answers
	failed   int64            // transport errors: refused, reset, timed out
	wrong    int64            // a read whose value was not the one last written
	samples  map[string]int64 // transport errors and 5xx bodies, by message (a few kinds)
	lat      []time.Duration
	elapsed  time.Duration
	bytesIn  int64
	cpuSvc   benchproc.CPU
	cpuMount benchproc.CPU
	cpuBack  benchproc.CPU
	client   float64 // vCPUs the load generator itself used
}

func (p *phase) rate() float64 { return float64(p.ok) / p.elapsed.Seconds() }

func (p *phase) errors() int64 { return p.status5 + p.status + p.failed + p.wrong }

// value is what key i holds after a pass of generation gen: its name and
// generation, padded to size, so a read can tell a stale value.
func value(i, gen, size int) []byte {
	v := fmt.Appendf(nil, "key %08d generation %d|", i, gen)
	for len(v) < size {
		v = append(v, byte('a'+(i+len(v))%26))
	}
	return v[:size]
}

func keyPath(i int) string { return fmt.Sprintf("/kv/k%08d", i) }

// newClient gives each of n clients its own kept-alive connection.
func newClient(n int) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: n, MaxIdleConnsPerHost: n, MaxConnsPerHost: n, IdleConnTimeout: time.Minute,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
}

// runPhase sends one request per key, keys taken in order by clients
// concurrent clients in a closed loop: POST value(i, gen) when write,
// else GET and compare with value(i, gen).
//
// acked[i] is the generation of key i's last acknowledged write (0: none
// yet) and tried[i] that of its last attempt: a read accepts either, since
// a write that failed (a 503 for want of a barrier) may still have been
// applied, and skips a key never acknowledged.
func runPhase(ctx context.Context, s *scenario, client *http.Client, name string, keys, clients, size, gen int, write bool, acked, tried []atomic.Int32) *phase {
	l := &phaseLoad{ctx: ctx, s: s, client: client, keys: keys, size: size, gen: gen, write: write, acked: acked, tried: tried,
		p: &phase{name: name, samples: map[string]int64{}}}
	var wg sync.WaitGroup
	svc0, mnt0, bk0 := s.cpu()
	self0 := benchproc.SelfCPU()
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.add(l.work())
		}()
	}
	wg.Wait()
	p := l.p
	p.elapsed = time.Since(start)
	p.client = float64(benchproc.SelfCPU().Minus(self0).Total()) / float64(p.elapsed)
	svc1, mnt1, bk1 := s.cpu()
	p.cpuSvc, p.cpuMount, p.cpuBack = svc1.Minus(svc0), mnt1.Minus(mnt0), bk1.Minus(bk0)
	return p
}

// phaseLoad is one phase as its clients share it: what they send, the
// next key to take, and the phase they add their counts to.
type phaseLoad struct {
	ctx          context.Context
	s            *scenario
	client       *http.Client
	keys, size   int
	gen          int
	write        bool
	acked, tried []atomic.Int32
	next         atomic.Int64

	mu sync.Mutex // guards p
	p  *phase
}

// tally is one client's counts over a phase.
type tally struct {
	lat                                []time.Duration
	ok, s5, st, failed, wrong, bytesIn int64
}

// note counts a failure's message, keeping at most 8 kinds.
func (l *phaseLoad) note(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.p.samples[msg]; ok || len(l.p.samples) < 8 {
		l.p.samples[msg]++
	}
}

// work is one client: it takes the next key until there is none left.
func (l *phaseLoad) work() *tally {
	var t tally
	for l.ctx.Err() == nil {
		i := int(l.next.Add(1)) - 1
		if i >= l.keys {
			break
		}
		l.request(i, &t)
	}
	return &t
}

// request sends key i's POST or GET and counts its outcome in t. A read
// of a key never acknowledged is skipped.
func (l *phaseLoad) request(i int, t *tally) {
	ctx, s, size, gen, write := l.ctx, l.s, l.size, l.gen, l.write
	want := value(i, gen, size)
	var alt []byte
	if !write {
		a := int(l.acked[i].Load())
		if a == 0 {
			return
		}
		want = value(i, a, size)
		if tr := int(l.tried[i].Load()); tr != a {
			alt = value(i, tr, size)
		}
	} else {
		l.tried[i].Store(int32(gen))
	}
	var req *http.Request
	if write {
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, s.target+keyPath(i), bytes.NewReader(want))
	} else {
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, s.target+keyPath(i), nil)
	}
	t0 := time.Now()
	resp, err := l.client.Do(req)
	if err != nil {
		t.failed++
		l.note(errKind(err))
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	switch {
	case err != nil:
		t.failed++
	case resp.StatusCode >= 500:
		t.s5++
		l.note(fmt.Sprintf("%d %s", resp.StatusCode, firstLine(body)))
	case resp.StatusCode >= 300:
		t.st++
	case !write && !bytes.Equal(body, want) && (alt == nil || !bytes.Equal(body, alt)):
		t.wrong++
	default:
		if write {
			l.acked[i].Store(int32(gen))
		}
		t.ok++
		t.lat = append(t.lat, d)
		t.bytesIn += int64(len(body))
	}
}

// add adds a client's counts to the phase.
func (l *phaseLoad) add(t *tally) {
	l.mu.Lock()
	p := l.p
	p.lat = append(p.lat, t.lat...)
	p.ok += t.ok
	p.status5 += t.s5
	p.status += t.st
	p.failed += t.failed
	p.wrong += t.wrong
	p.bytesIn += t.bytesIn
	l.mu.Unlock()
}

// scenarioRun is one scenario's phases and checks.
type scenarioRun struct {
	name     string
	backups  int
	fdLimit  int
	clients  int
	keys     int
	phases   []*phase
	curve    []*phase // updates at each of -curve-clients
	verified string
	exited   []string
	shed     map[string]float64
}

// runScenario brings the scenario up, runs the insert, update and read
// passes, checks the backups and that nothing died, and takes it down.
func runScenario(ctx context.Context, cfg config, name string, sh shape, fdLimit, clients, keys, reads int) (*scenarioRun, error) {
	s, err := up(ctx, cfg, name, sh, fdLimit)
	if err != nil {
		if s != nil {
			s.down(true)
		}
		return nil, err
	}
	r := &scenarioRun{name: name, backups: sh.backups, fdLimit: fdLimit, clients: clients, keys: keys}
	client := newClient(clients)
	defer client.CloseIdleConnections()
	acked, tried := make([]atomic.Int32, keys), make([]atomic.Int32, keys)
	passes := []struct {
		name  string
		gen   int
		write bool
	}{{"insert", 1, true}, {"update", 2, true}}
	for i := 1; i <= reads; i++ {
		passes = append(passes, struct {
			name  string
			gen   int
			write bool
		}{fmt.Sprintf("read %d", i), 2, false})
	}
	for _, ps := range passes {
		ph := runPhase(ctx, s, client, ps.name, keys, clients, cfg.value, ps.gen, ps.write, acked, tried)
		r.phases = append(r.phases, ph)
		fmt.Printf("  %-8s %8.0f ok/s  p50 %6.2f ms  p99 %7.2f ms  5xx %d  other %d  failed %d  wrong %d\n",
			ph.name, ph.rate(), pctMs(ph.lat, 0.5), pctMs(ph.lat, 0.99), ph.status5, ph.status, ph.failed, ph.wrong)
		if ctx.Err() != nil {
			s.down(true)
			return nil, ctx.Err()
		}
	}
	// The curve: updates of the first curveKeys keys at each client count,
	// for latency against throughput (not in the lowered-limit run).
	if fdLimit == 0 && cfg.curveKeys > 0 {
		for i, n := range cfg.curveClients {
			c := newClient(n)
			ph := runPhase(ctx, s, c, fmt.Sprintf("update, %d clients", n), min(cfg.curveKeys, keys), n, cfg.value, 3+i, true, acked, tried)
			c.CloseIdleConnections()
			r.curve = append(r.curve, ph)
			fmt.Printf("  curve: %3d clients %8.0f ok/s  p50 %6.2f ms  p99 %7.2f ms\n", n, ph.rate(), pctMs(ph.lat, 0.5), pctMs(ph.lat, 0.99))
			if ctx.Err() != nil {
				s.down(true)
				return nil, ctx.Err()
			}
		}
	}
	client.CloseIdleConnections()
	r.shed = s.shed()
	r.exited = s.exited()
	if len(r.exited) == 0 {
		if r.verified, err = s.verify(); err != nil {
			s.down(true)
			return nil, err
		}
	}
	if err := s.down(false); err != nil {
		return r, err
	}
	if len(r.exited) > 0 {
		return r, fmt.Errorf("processes died during the run: %s", strings.Join(r.exited, ", "))
	}
	return r, nil
}

// errKind shortens a transport error to its kind (no addresses or ports).
func errKind(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return "transport: " + msg
}

func firstLine(b []byte) string {
	l, _, _ := strings.Cut(string(b), "\n")
	if len(l) > 80 {
		l = l[:80] + "..."
	}
	return l
}
