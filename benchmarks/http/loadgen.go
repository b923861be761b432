package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
)

// result is one run of the open-loop generator at one offered rate.
type result struct {
	target   string
	rate     float64       // offered, requests per second
	fraction float64       // rate as a fraction of plain's peak (0: a fixed -rates sweep)
	duration time.Duration // arrivals were offered for this long
	elapsed  time.Duration // from the first arrival until the last answer
	sent     int
	ok       int // 2xx
	status5  int // 5xx answers (503 = shed or withheld)
	failed   int // transport errors and other statuses
	dropped  int // arrivals past the generator's own in-flight cap
	lat      []time.Duration
	group    float64       // mean responses per barrier (proxy only)
	barrier  time.Duration // mean barrier round trip seen by the proxy
	hold     time.Duration // mean time a response was held
	barriers float64       // barriers taken
	client   float64       // vCPU this process used (closed loop only): the generator, and a target's delay proxies
	cpu      string        // the target's CPU per 2xx answer in ms (usage.perRequest)
}

// record counts one answer with status code (0: a transport error).
func (r *result) record(code int, lat time.Duration) {
	switch {
	case code/100 == 2:
		r.ok++
		r.lat = append(r.lat, lat)
	case code/100 == 5:
		r.status5++
	default:
		r.failed++
	}
}

// goodput is 2xx per second over the time the answers took: an
// overloaded target answers long after the last arrival, and counting its
// answers against the offered duration alone would overstate it.
func (r result) goodput() float64 { return float64(r.ok) / max(r.duration, r.elapsed).Seconds() }

func (r result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(p*float64(len(r.lat))))]
}

// openLoop offers requests at rate per second for d with Poisson
// arrivals (exponential gaps), whatever the server does: a slow server
// does not slow the arrivals down (no coordinated omission). Latency is
// measured from each request's scheduled arrival, so time spent behind
// the generator's own backlog counts too.
func openLoop(ctx context.Context, client *http.Client, url string, rate float64, d time.Duration, seed uint64, maxInflight int) result {
	res := result{target: url, rate: rate, duration: d}
	rng := rand.New(rand.NewPCG(seed, uint64(rate)))
	body := make([]byte, 512)
	for i := range body {
		body[i] = byte('a' + rng.IntN(26))
	}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		sem   = make(chan struct{}, maxInflight)
		start = time.Now()
		next  = start
		end   = next.Add(d)
	)
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if next.After(end) || ctx.Err() != nil {
			break
		}
		if w := time.Until(next); w > 0 {
			time.Sleep(w)
		}
		res.sent++
		select {
		case sem <- struct{}{}:
		default:
			res.dropped++
			continue
		}
		key := rng.IntN(10000)
		wg.Add(1)
		go func(at time.Time) {
			defer wg.Done()
			defer func() { <-sem }()
			code := post(ctx, client, fmt.Sprintf("%s/kv/k%d", url, key), body)
			lat := time.Since(at)
			mu.Lock()
			defer mu.Unlock()
			res.record(code, lat)
		}(next)
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	slices.Sort(res.lat)
	return res
}

// closedLoop keeps clients requests in flight for d, each client sending
// its next as soon as its last is answered: the target's peak rate.
func closedLoop(ctx context.Context, client *http.Client, url string, clients int, d time.Duration, seed uint64) result {
	res := result{target: url, duration: d}
	var mu sync.Mutex
	var wg sync.WaitGroup
	self0, start := benchproc.SelfCPU(), time.Now()
	end := start.Add(d)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			body := make([]byte, 512)
			for i := range body {
				body[i] = byte('a' + rng.IntN(26))
			}
			for time.Now().Before(end) && ctx.Err() == nil {
				start := time.Now()
				code := post(ctx, client, fmt.Sprintf("%s/kv/k%d", url, rng.IntN(10000)), body)
				lat := time.Since(start)
				mu.Lock()
				res.sent++
				res.record(code, lat)
				mu.Unlock()
			}
		}(c)
	}
	wg.Wait()
	res.client = float64(benchproc.SelfCPU().Minus(self0).Total()) / float64(time.Since(start))
	slices.Sort(res.lat)
	res.rate = float64(res.sent) / d.Seconds()
	return res
}

func post(ctx context.Context, client *http.Client, url string, body []byte) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func newClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 30 * time.Second,
	}}
}
