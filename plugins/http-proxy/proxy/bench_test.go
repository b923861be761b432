package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// The proxy's own cost per request: a keep-alive upstream that answers at
// once, barriers that return at once (sdktest.Host), many clients in
// parallel. Compare BenchmarkDirect with BenchmarkThroughProxy.

func benchPosts(b *testing.B, addr string) {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	body := strings.Repeat("x", 512)
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Post("http://"+addr+"/kv/x", "text/plain", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

var instant = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "stored\n")
})

func BenchmarkDirect(b *testing.B) { benchPosts(b, serve(b, instant)) }

func BenchmarkThroughProxy(b *testing.B) { benchPosts(b, start(b, "pool=16", instant).addr) }
