package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// xmlrpc calls method with params (already-encoded <param> values) and
// returns the response body, failing on a transport error, a non-200 or
// a fault.
func xmlrpc(ctx context.Context, c *http.Client, target, method string, params ...string) ([]byte, error) {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0"?><methodCall><methodName>` + method + `</methodName><params>`)
	for _, p := range params {
		b.WriteString("<param><value>" + p + "</value></param>")
	}
	b.WriteString("</params></methodCall>")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+"/xmlrpc.php", strings.NewReader(b.String()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "text/xml")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("%s: HTTP %d: %.120s", method, resp.StatusCode, body)
	}
	if bytes.Contains(body, []byte("<fault>")) {
		return body, fmt.Errorf("%s: fault: %.200s", method, body)
	}
	return body, nil
}

func str(s string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(s))
	return "<string>" + b.String() + "</string>"
}

func integer(i int) string { return fmt.Sprintf("<int>%d</int>", i) }

func post(title, content string) string {
	return "<struct><member><name>post_title</name><value>" + str(title) + "</value></member>" +
		"<member><name>post_content</name><value>" + str(content) + "</value></member>" +
		"<member><name>post_status</name><value>" + str("publish") + "</value></member></struct>"
}

// text is about n bytes of words, different for every seed.
func text(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, 7))
	words := []string{"replica", "barrier", "journal", "commit", "volume", "backup", "primary", "durable", "batch", "fsync"}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()
}

// seedPosts creates n posts through wp.newPost and returns their ids.
func seedPosts(ctx context.Context, c *http.Client, target string, n int) ([]int, error) {
	ids := make([]int, n)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	sem := make(chan struct{}, 4)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			body, err := xmlrpc(ctx, c, target, "wp.newPost", integer(1), str(wpUser), str(wpPass), post(fmt.Sprintf("post %d", i), text(uint64(i), 1000)))
			if err == nil {
				_, err = fmt.Sscanf(between(string(body), "<string>", "</string>"), "%d", &ids[i])
			}
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, fmt.Errorf("seed posts: %w", err)
	}
	return ids, nil
}

func between(s, a, b string) string {
	_, rest, _ := strings.Cut(s, a)
	v, _, _ := strings.Cut(rest, b)
	return v
}

// sample is one editPost: when it was due, how long it took from then,
// and whether it succeeded.
type sample struct {
	lat  time.Duration
	ok   bool
	late time.Duration // open loop: how long after it was due the request was sent
}

// editor sends wp.editPost round-robin over ids.
type editor struct {
	c      *http.Client
	target string
	ids    []int
	next   atomic.Uint64
}

func (e *editor) edit(ctx context.Context) error {
	i := e.next.Add(1)
	id := e.ids[int(i)%len(e.ids)]
	_, err := xmlrpc(ctx, e.c, e.target, "wp.editPost", integer(1), str(wpUser), str(wpPass), integer(id),
		post(fmt.Sprintf("post %d edit %d", id, i), text(i, 1000)))
	return err
}

// closedLoop runs clients back-to-back editors for d and returns the
// samples: the peak the site sustains.
func (e *editor) closedLoop(ctx context.Context, clients int, d time.Duration) []sample {
	var mu sync.Mutex
	var out []sample
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []sample
			for time.Now().Before(end) && ctx.Err() == nil {
				t := time.Now()
				err := e.edit(ctx)
				mine = append(mine, sample{lat: time.Since(t), ok: err == nil})
			}
			mu.Lock()
			out = append(out, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// openLoop sends editPosts with Poisson arrivals at rate per second for d,
// each measured from when it was due (so queueing counts), with at most
// maxOutstanding in flight (more are counted as failed, not sent).
func (e *editor) openLoop(ctx context.Context, rate float64, d time.Duration, seed uint64) []sample {
	r := rand.New(rand.NewPCG(seed, 11))
	var mu sync.Mutex
	var out []sample
	var wg sync.WaitGroup
	const maxOutstanding = 256
	sem := make(chan struct{}, maxOutstanding)
	start := time.Now()
	due := start
	for due.Sub(start) < d && ctx.Err() == nil {
		due = due.Add(time.Duration(r.ExpFloat64() / rate * float64(time.Second)))
		time.Sleep(time.Until(due))
		select {
		case sem <- struct{}{}:
		default:
			mu.Lock()
			out = append(out, sample{})
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func(due time.Time) {
			defer wg.Done()
			defer func() { <-sem }()
			late := time.Since(due)
			err := e.edit(ctx)
			mu.Lock()
			out = append(out, sample{time.Since(due), err == nil, late})
			mu.Unlock()
		}(due)
	}
	wg.Wait()
	return out
}
