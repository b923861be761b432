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
)

// result is one run of the open-loop generator at one offered rate.
type result struct {
	target   string
	rate     float64 // offered, requests per second
	duration time.Duration
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
}

func (r result) goodput() float64 { return float64(r.ok) / r.duration.Seconds() }

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
		mu   sync.Mutex
		wg   sync.WaitGroup
		sem  = make(chan struct{}, maxInflight)
		next = time.Now()
		end  = next.Add(d)
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
			switch {
			case code/100 == 2:
				res.ok++
				res.lat = append(res.lat, lat)
			case code/100 == 5:
				res.status5++
			default:
				res.failed++
			}
		}(next)
	}
	wg.Wait()
	slices.Sort(res.lat)
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
