package sdk

import (
	"errors"
	"fmt"
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
	if rest, ok := strings.CutPrefix(pattern, "**/"); ok {
		// At any depth: try the rest against p and against every path
		// below one of p's directories.
		for q := p; ; {
			if matches(rest, q) {
				return true
			}
			i := strings.IndexByte(q, '/')
			if i < 0 {
				return false
			}
			q = q[i+1:]
		}
	}
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

// CheckPattern reports whether pattern is a valid rule pattern: relative
// to the volume, no "." or ".." elements, and valid path.Match syntax.
func CheckPattern(pattern string) error {
	body := strings.TrimSuffix(strings.TrimPrefix(pattern, "**/"), "/")
	if body == "" || strings.HasPrefix(pattern, "/") {
		return fmt.Errorf("%w: %q: want a pattern relative to the volume root", ErrPattern, pattern)
	}
	for _, el := range strings.Split(body, "/") {
		if el == "" || el == "." || el == ".." || el == "**" {
			return fmt.Errorf("%w: %q: empty, \".\", \"..\" or inner \"**\" element", ErrPattern, pattern)
		}
		if _, err := path.Match(el, ""); err != nil {
			return fmt.Errorf("%w: %q: %v", ErrPattern, pattern, err)
		}
	}
	return nil
}

// ErrPattern: a rule pattern pbfs cannot use.
var ErrPattern = errors.New("bad rule pattern")
