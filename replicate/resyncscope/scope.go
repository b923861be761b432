// Package resyncscope is the scope of a targeted resync: the paths two
// histories may hold differently, which the primary and the backup each
// read from their journals and send each other. A targeted resync
// reconciles only those: the paths their batches since they parted name,
// and, on a deposed primary, what it changed that its journal never got.
// Every other path is as it was where they parted, on both sides
// (docs/ARCHITECTURE.md, "Resync"). It knows the protocol's Scope message
// (replpb) and the journal's ops, and nothing of either side.
package resyncscope

import (
	"errors"
	"fmt"
	"path"
	"slices"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
)

// MaxBytes bounds the path bytes of one Scope message (a backup's
// reaches the primary through gRPC's 4 MiB default): more than that many
// paths, and a full resync is as cheap.
const MaxBytes = 2 << 20

// Resync kinds, for the log, pbfs events and
// pbfs_replicate_resyncs_total{kind}.
const (
	Full     = "full"
	Targeted = "targeted"
)

// errCostly: the batches to read cost more than a full resync.
var errCostly = errors.New("the batches since the histories parted hold more bytes than the volume's files")

// Scope is a set of subtrees and single entries (apply/scope.go).
type Scope struct {
	subtrees map[string]bool
	entries  map[string]bool
}

// New is an empty scope.
func New() *Scope {
	return &Scope{subtrees: map[string]bool{}, entries: map[string]bool{}}
}

// Subtree adds p and everything under it, and p's parent's attributes (a
// name added or removed moved its mtime).
func (sc *Scope) Subtree(p string) {
	sc.subtrees[p] = true
	if p != "." {
		sc.entries[Parent(p)] = true
	}
}

// Entry adds p alone: its attributes, or its data.
func (sc *Scope) Entry(p string) { sc.entries[p] = true }

// addOps adds what ops name: a namespace op's paths as subtrees (a rename
// moves everything under its source), both names of a link (the new one as
// a subtree), and the path of any other op as an entry (a directory's
// attributes, not its subtree).
func (sc *Scope) addOps(ops []journal.Op) {
	for i := range ops {
		op := &ops[i]
		switch {
		case op.Kind == journal.KindLink:
			sc.Entry(op.Path)
			sc.Subtree(op.Path2)
		case op.Kind == journal.KindRename:
			sc.Subtree(op.Path)
			sc.Subtree(op.Path2)
		case op.Kind.IsNamespace():
			sc.Subtree(op.Path)
		default:
			sc.Entry(op.Path)
		}
	}
}

// Covers reports whether p is in the scope: in a subtree, or an entry.
func (sc *Scope) Covers(p string) bool {
	return sc.entries[p] || sc.inSubtree(p)
}

func (sc *Scope) inSubtree(p string) bool {
	for q := p; ; q = Parent(q) {
		if sc.subtrees[q] {
			return true
		}
		if q == "." {
			return false
		}
	}
}

// Merge adds what o holds.
func (sc *Scope) Merge(o *Scope) {
	for p := range o.subtrees {
		sc.subtrees[p] = true
	}
	for p := range o.entries {
		sc.entries[p] = true
	}
}

// Whole reports whether the scope is the whole volume.
func (sc *Scope) Whole() bool { return sc.subtrees["."] }

// Subtrees is the scope's subtrees, sorted: all a backup needs of the
// final scope, whose entries the primary sends.
func (sc *Scope) Subtrees() [][]byte { return sortedBytes(sc.subtrees) }

// ReadBatches adds what batches from..to of st name. It fails with
// errCostly once they hold more than budget bytes (0: no limit), and if
// st lacks one of them.
func (sc *Scope) ReadBatches(st *journal.Store, from, to uint64, budget int64) error {
	var used int64
	for seq := from; seq <= to; seq++ {
		enc, err := st.Get(seq)
		if err != nil {
			return fmt.Errorf("read batch %d: %w", seq, err)
		}
		if used += int64(len(enc)); budget > 0 && used > budget {
			return fmt.Errorf("%w (%d bytes from batch %d)", errCostly, used, from)
		}
		b, err := journal.Decode(enc)
		if err != nil {
			return fmt.Errorf("read batch %d: %w", seq, err)
		}
		sc.addOps(b.Ops)
	}
	return nil
}

// Proto is the scope as a message; fails if its paths exceed MaxBytes.
func (sc *Scope) Proto() (*replpb.Scope, error) {
	msg := &replpb.Scope{Subtrees: sortedBytes(sc.subtrees), Entries: sortedBytes(sc.entries)}
	if n := PathBytes(msg.Subtrees) + PathBytes(msg.Entries); n > MaxBytes {
		return nil, fmt.Errorf("%d paths (%d bytes) are too many to list", len(msg.Subtrees)+len(msg.Entries), n)
	}
	return msg, nil
}

// FromProto reads a peer's scope, refusing a path no op could carry.
func FromProto(msg *replpb.Scope) (*Scope, error) {
	sc := New()
	for _, list := range []struct {
		paths [][]byte
		add   func(string)
	}{{msg.Subtrees, sc.Subtree}, {msg.Entries, sc.Entry}} {
		for _, b := range list.paths {
			if p := string(b); journal.ValidPath(p) {
				list.add(p)
			} else {
				return nil, fmt.Errorf("resync scope: path %q: %w", b, journal.ErrInvalidOp)
			}
		}
	}
	return sc, nil
}

func sortedBytes(set map[string]bool) [][]byte {
	keys := make([]string, 0, len(set))
	for p := range set {
		keys = append(keys, p)
	}
	slices.Sort(keys)
	out := make([][]byte, len(keys))
	for i, p := range keys {
		out[i] = []byte(p)
	}
	return out
}

// PathBytes is what paths weigh against MaxBytes.
func PathBytes(paths [][]byte) int {
	n := 0
	for _, p := range paths {
		n += len(p) + 4
	}
	return n
}

// Parent is the directory holding p; "." for a name in the root.
func Parent(p string) string {
	if d := path.Dir(p); d != "" {
		return d
	}
	return "."
}
