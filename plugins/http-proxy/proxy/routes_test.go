package proxy

import (
	"net/http/httptest"
	"testing"
)

func TestRoutes(t *testing.T) {
	rs, err := parseRoutes(durSync, map[durability]string{durNone: "GET:/static/|/healthz|HEAD:", durSync: "GET:/static/private/"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, path string
		want         durability
	}{
		{"GET", "/static/a.css", durNone},
		{"POST", "/static/a.css", durSync},
		{"GET", "/static/private/x", durSync},
		{"POST", "/healthz", durNone},
		{"HEAD", "/anything", durNone},
		{"GET", "/wp-admin", durSync},
		// What the service reads after resolving dot segments decides.
		{"POST", "/healthz/../kv/x", durSync},
		{"POST", "/healthz/%2e%2e/kv/x", durSync},
		{"GET", "/static/../wp-admin/", durSync},
		{"GET", "//static/a.css", durNone},
		{"GET", "/static/./private/x", durSync},
		// A none prefix names whole segments.
		{"POST", "/healthzx", durSync},
		{"POST", "/healthz/", durNone},
	} {
		if got := rs.of(httptest.NewRequest(c.method, c.path, nil)); got != c.want {
			t.Errorf("%s %s: %v, want %v", c.method, c.path, got, c.want)
		}
	}
}
