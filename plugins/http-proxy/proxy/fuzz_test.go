package proxy

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pbfs/pbfs/plugins/sdk"
)

// FuzzConfig: any configuration either parses or fails with an error, and
// parsed routes classify any request without panicking.
func FuzzConfig(f *testing.F) {
	f.Add("GET:/static/|/healthz|HEAD:", "POST:/", "sync", "16")
	f.Add("::|/|x:", "", "none", "-1")
	f.Fuzz(func(t *testing.T, none, syncRoutes, dur, pool string) {
		cfg, err := ParseConfig(sdk.Config{"listen": "127.0.0.1:0", "upstream": "http://127.0.0.1:1",
			"none": none, "sync": syncRoutes, "durability": dur, "pool": pool})
		if err != nil {
			return
		}
		if cfg.Pool <= 0 {
			t.Fatalf("pool %d accepted", cfg.Pool)
		}
		for _, target := range []string{"/", "/static/a", "/healthz", "/" + strings.Repeat("a", 64)} {
			for _, m := range []string{"GET", "POST", "HEAD"} {
				if d := cfg.Routes.of(httptest.NewRequest(m, target, nil)); d != durSync && d != durNone {
					t.Fatalf("durability %d", d)
				}
			}
		}
	})
}
