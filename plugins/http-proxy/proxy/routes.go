package proxy

import (
	"fmt"
	"net/http"
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

func (rs routes) of(r *http.Request) durability {
	best, bestLen, bestMethod := rs.def, -1, false
	for _, e := range rs.entries {
		if e.method != "" && e.method != r.Method {
			continue
		}
		if !strings.HasPrefix(r.URL.Path, e.prefix) {
			continue
		}
		n := len(e.prefix)
		if n > bestLen || (n == bestLen && e.method != "" && !bestMethod) {
			best, bestLen, bestMethod = e.dur, n, e.method != ""
		}
	}
	return best
}
