package proxy

import (
	"fmt"
	"net/http"
	"path"
	"strings"
)

// durability says whether a route's responses wait for a barrier.
type durability int

const (
	durSync durability = iota // held until a barrier covers them (the default)
	durNone                   // streamed at once: routes the operator declares read-only
)

func parseDurability(s string) (durability, error) {
	switch s {
	case "", "sync":
		return durSync, nil
	case "none":
		return durNone, nil
	}
	return 0, fmt.Errorf("config: durability=%q: want sync or none", s)
}

// route is one entry of a sync= or none= list: METHOD:PREFIX, METHOD:
// (every path) or /PREFIX (every method).
type route struct {
	method, prefix string
	dur            durability
}

// routes picks a request's durability: the matching entry with the
// longest path prefix wins, a method-specific one over a method-any one
// of the same length; with no match, the default applies.
type routes struct {
	def     durability
	entries []route
}

func parseRoutes(def durability, lists map[durability]string) (routes, error) {
	rs := routes{def: def}
	for dur, list := range lists {
		for _, e := range strings.Split(list, "|") {
			if e == "" {
				continue
			}
			var r route
			if strings.HasPrefix(e, "/") {
				r.prefix = e
			} else if m, p, ok := strings.Cut(e, ":"); ok && m != "" && (p == "" || strings.HasPrefix(p, "/")) {
				r.method, r.prefix = strings.ToUpper(m), p
			} else {
				return routes{}, fmt.Errorf("config: route %q: want METHOD:/prefix, METHOD: or /prefix", e)
			}
			r.dur = dur
			rs.entries = append(rs.entries, r)
		}
	}
	return rs, nil
}

// of matches the path as the service will likely read it, with dot
// segments and repeated slashes resolved (nginx, Apache and most routers
// do): matched raw, "/healthz/../kv/x" took a none route past the hold
// to a write. A none entry matches whole segments of the cleaned path
// only ("/healthz" is not "/healthzx"); a sync entry matches the raw
// path or the cleaned one. Either way a doubtful request is held.
func (rs routes) of(r *http.Request) durability {
	raw := r.URL.Path
	clean := cleanPath(raw)
	best, bestLen, bestMethod := rs.def, -1, false
	for _, e := range rs.entries {
		if e.method != "" && e.method != r.Method {
			continue
		}
		if e.dur == durNone && !segmentPrefix(clean, e.prefix) {
			continue
		}
		if e.dur != durNone && !strings.HasPrefix(raw, e.prefix) && !strings.HasPrefix(clean, e.prefix) {
			continue
		}
		n := len(e.prefix)
		if n > bestLen || (n == bestLen && e.method != "" && !bestMethod) {
			best, bestLen, bestMethod = e.dur, n, e.method != ""
		}
	}
	return best
}

// cleanPath resolves dot segments and repeated slashes, keeping a
// trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// segmentPrefix reports whether prefix is p or names a run of p's whole
// segments.
func segmentPrefix(p, prefix string) bool {
	if !strings.HasPrefix(p, prefix) {
		return false
	}
	return len(p) == len(prefix) || strings.HasSuffix(prefix, "/") || p[len(prefix)] == '/'
}
