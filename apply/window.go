package apply

import (
	"strings"

	"github.com/pbfs/pbfs/journal"
)

// Window is a run of batches applied one after another with no sync of
// the volume between them (ApplyUnsynced), so that a backup pays one
// syncfs for many small batches. After a power loss any part of their
// writes may have reached the disk, in any order, and nothing says how
// far the run got; so a batch is admitted only while a Redo of the whole
// run, batch after batch from its first, gives the volume the run left
// whatever mix of it the disk holds, and the batches after it too (a Redo
// of a batch never applied is an Apply). That holds when:
//   - each batch is Redoable on its own;
//   - no namespace op of a batch names a path an earlier batch of the run
//     used at all (by a namespace op, or by a data or metadata op, which
//     a redo would otherwise run on whatever the name now holds);
//   - no rename of a batch moves a directory that holds a path an earlier
//     batch of the run used.
//
// Data and metadata ops on paths the run names are idempotent and redone
// in order. Recovery (replicate) rebuilds the window from the last synced
// batch with Admit and redoes the batches it admits.
type Window struct {
	n     int
	bytes int64
	paths map[string]bool // used in the run; true: by a namespace op
	moved []string        // prefixes of directories the run renamed
}

// Len is the number of batches in the window.
func (w *Window) Len() int { return w.n }

// Bytes is the encoded size of the window's batches.
func (w *Window) Bytes() int64 { return w.bytes }

// Reset empties the window (after a sync of the volume).
func (w *Window) Reset() { *w = Window{} }

// Admit adds b, of size encoded bytes, to the window if the run stays
// redoable, and reports whether it did.
func (w *Window) Admit(b *journal.Batch, size int64) bool {
	if !Redoable(b) {
		return false
	}
	var moved []string
	for i := range b.Ops {
		op := &b.Ops[i]
		if !op.Kind.IsNamespace() {
			continue
		}
		if _, used := w.paths[op.Path]; used {
			return false
		}
		if op.Kind == journal.KindRename || op.Kind == journal.KindLink {
			if _, used := w.paths[op.Path2]; used {
				return false
			}
		}
		if op.Kind == journal.KindRename {
			moved = append(moved, op.Path+"/", op.Path2+"/")
		}
	}
	for p := range w.paths {
		for _, m := range moved {
			if strings.HasPrefix(p, m) {
				return false
			}
		}
	}
	if w.paths == nil {
		w.paths = map[string]bool{}
	}
	for i := range b.Ops {
		op := &b.Ops[i]
		if op.Kind.IsNamespace() {
			w.paths[op.Path] = true
			if op.Kind == journal.KindRename || op.Kind == journal.KindLink {
				w.paths[op.Path2] = true
			}
		} else if !w.paths[op.Path] {
			w.paths[op.Path] = false
		}
	}
	w.moved = append(w.moved, moved...)
	w.n++
	w.bytes += size
	return true
}
