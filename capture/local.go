package capture

import (
	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// A Classifier tells capture what a path of the volume is (hint plugins'
// rules and the mount's flags, evaluated by the mount): whether it is
// local-only and what a fsync of it means. Paths are relative to the
// volume root, as ops carry them. It must be a pure function of the path.
type Classifier func(path string) Class

// Class is what capture does with one path.
type Class struct {
	// LocalOnly paths are written to the primary's disk and never
	// journaled, so never shipped: a pid file, a socket, a database's
	// temporary tablespace. Everything below a local-only directory is
	// local-only too.
	LocalOnly bool
	Fsync     FsyncPolicy
}

// FsyncPolicy says what a service's fsync of a file means.
type FsyncPolicy uint8

const (
	// FsyncLocal syncs the primary's disk, as a plain directory would.
	FsyncLocal FsyncPolicy = iota
	// FsyncReplicated returns once everything written before the fsync
	// is durable on the ack set (a barrier), without syncing the
	// primary's disk.
	FsyncReplicated
	// FsyncBoth does both.
	FsyncBoth
	// FsyncDeferred returns at once: a later barrier (a frontend's
	// output commit) makes the write durable on the ack set.
	FsyncDeferred
)

var fsyncPolicyNames = [...]string{"local", "replicated", "both", "deferred"}

func (p FsyncPolicy) String() string {
	if int(p) < len(fsyncPolicyNames) {
		return fsyncPolicyNames[p]
	}
	return "unknown"
}

// Local reports whether p, or a directory above it, is local-only.
func (f *FS) Local(p string) bool {
	c := f.opts.Classify
	if c == nil || p == "." || p == "" {
		return false
	}
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			if c(p[:i]).LocalOnly {
				return true
			}
		}
	}
	return false
}

// localNode reports whether n's ops stay on the primary's disk.
func (n *Node) localNode() bool { return n.local.Load() }

// FsyncPolicy returns what a fsync of n means: its path's class (local-only
// files sync locally; a node with no name left keeps the policy of none).
func (f *FS) FsyncPolicy(n *Node) FsyncPolicy {
	if f.opts.Classify == nil || !f.opts.Capture || n.localNode() {
		return FsyncLocal
	}
	p, ok := f.table.path(n)
	if !ok {
		return FsyncLocal
	}
	return f.opts.Classify(p).Fsync
}

// checkCross refuses, with EXDEV as between two file systems, a rename or
// link that would move a file (or anything below a directory) between a
// local-only and a replicated path: the backups would be asked to move a
// file they never had, or never learn of one. Tools (mv, cp, rsync) copy
// across EXDEV, and the copy is captured like any write. The caller holds
// table.mu exclusively.
func (f *FS) checkCross(op, np string, dir bool) error {
	if f.opts.Classify == nil || !f.opts.Capture {
		return nil
	}
	local := f.Local(op)
	cross := local != f.Local(np)
	if !cross && dir && !local {
		// (Below a local-only directory everything is local-only, at
		// either name: nothing to walk.)
		cross = f.subtreeCrosses(op, np)
	}
	if cross {
		f.m.CrossRefused.Inc()
		f.log.Warn("refused a rename or link between a local-only and a replicated path (EXDEV)", "from", op, "to", np)
		return unix.EXDEV
	}
	return nil
}

// subtreeCrosses reports whether some entry below directory op would
// change between local-only and replicated if op were renamed to np (a
// rule may name paths inside a directory). It walks the backing tree.
func (f *FS) subtreeCrosses(op, np string) bool {
	var visit func(rel string) bool
	visit = func(rel string) bool {
		fd, err := unix.Openat(f.root, op+rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return true // cannot tell: refuse
		}
		ents, err := readDirents(fd, false)
		unix.Close(fd)
		if err != nil {
			return true
		}
		for _, d := range ents {
			r := rel + "/" + d.Name
			if f.Local(op+r) != f.Local(np+r) {
				return true
			}
			if d.Type == unix.DT_DIR && visit(r) {
				return true
			}
		}
		return false
	}
	return visit("")
}

// keptLocal reports whether a namespace op stays on the primary's disk.
// Renames and links never cross classes (checkCross), so the op's first
// path decides.
func (f *FS) keptLocal(op *journal.Op) bool {
	if f.opts.Classify == nil || !f.Local(op.Path) {
		return false
	}
	f.m.LocalOps.Inc()
	return true
}

// classifyNew sets a new node's class from its path; the caller holds
// table.mapMu.
func (t *table) classifyNew(n, parent *Node, name string) {
	if t.local == nil {
		return
	}
	if parent.localNode() {
		n.local.Store(true)
		return
	}
	pp, ok := t.pathLocked(parent)
	if !ok {
		return
	}
	n.local.Store(t.local(childPath(pp, name)).LocalOnly)
}

// captures reports whether n's changes are recorded: capture is on and n
// is not local-only.
func (f *FS) captures(n *Node) bool { return f.opts.Capture && !n.localNode() }
