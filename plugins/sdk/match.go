package sdk

import (
	"path"
	"strings"
)

// Match returns the hint of the first rule that matches the
// volume-relative path p, and whether any did.
func Match(rules []Rule, p string) (PathHint, bool) {
	p = strings.TrimPrefix(path.Clean("/"+p), "/")
	for _, r := range rules {
		if matches(r.Pattern, p) {
			return r.Hint, true
		}
	}
	return PathHint{}, false
}

// MatchAll classifies paths with Match; unmatched paths get the zero hint.
func MatchAll(rules []Rule, paths []string) []PathHint {
	out := make([]PathHint, len(paths))
	for i, p := range paths {
		out[i], _ = Match(rules, p)
	}
	return out
}

func matches(pattern, p string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/"); ok {
		// Everything below a directory: match the pattern against each
		// ancestor of p.
		for q := p; ; {
			i := strings.LastIndexByte(q, '/')
			if i < 0 {
				return false
			}
			q = q[:i]
			if ok, _ := path.Match(dir, q); ok {
				return true
			}
		}
	}
	ok, _ := path.Match(pattern, p)
	return ok
}
