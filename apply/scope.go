package apply

import (
	"fmt"
	"sort"

	"github.com/pbfs/pbfs/journal"
)

// A targeted resync reconciles a scope, not the whole volume: subtrees,
// each a path and everything under it, where the backup removes what the
// primary does not list, and single entries outside them, whose data and
// attributes it makes the primary's and nothing more (a subtree's parent
// directory, whose mtime its change moved; another name of a file inside
// one). Everything else is equal on both sides already, and is neither
// listed nor swept.

// Limit makes the resync reconcile only the given subtrees (and the
// entries that come outside them); call it before the first entry. A
// subtree of "." is the whole volume.
func (r *Reconciler) Limit(subtrees []string) error {
	set := make(map[string]bool, len(subtrees))
	for _, p := range subtrees {
		if !journal.ValidPath(p) {
			return fmt.Errorf("resync scope %q: %w", p, ErrInvalidOp)
		}
		set[p] = true
	}
	r.subtrees = set
	if !set["."] {
		r.open = nil // the root is swept only as a subtree of its own
	}
	return nil
}

// inScope reports whether p lies in a subtree the resync sweeps (always,
// when it is not limited).
func (r *Reconciler) inScope(p string) bool {
	if r.subtrees == nil {
		return true
	}
	for q := p; ; q = parentDir(q) {
		if r.subtrees[q] {
			return true
		}
		if q == "." {
			return false
		}
	}
}

// roots lists the subtrees that lie in no other, sorted.
func (r *Reconciler) roots() []string {
	var out []string
	for p := range r.subtrees {
		if p == "." || !r.inScope(parentDir(p)) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}
