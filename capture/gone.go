package capture

import (
	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// A file handle (name_to_handle_at, open_by_handle_at, an NFS export)
// names a file by its node id alone. While the kernel caches the inode it
// resolves the handle itself; once it has dropped it (memory pressure,
// drop_caches) it asks pbfs by id, with a LOOKUP of "." in the node, and
// by then the table has evicted the node. So the table remembers where
// each node it evicts with a name left was: its parent's id, its name and
// its inode number. A LOOKUP of "." finds the file there again under the
// same id, and a lookup by name of the same inode takes the same id back,
// so one inode is never two nodes. Every change to the volume looks its
// file up first, which takes the record, so a record names the file as it
// still is (a stat checks the inode number all the same). The newest
// maxGone records are kept; a handle of a file evicted longer ago, or of
// one deleted since, answers ESTALE.

// maxGone bounds the records of evicted nodes (about 100 bytes each).
const maxGone = 1 << 16

// goneNode is where an evicted node was.
type goneNode struct {
	parent uint64 // the parent's id, live or evicted
	name   string
	ino    uint64
	typ    uint32
	seq    uint64 // which eviction, for the queue
}

// goneRef is a record in eviction order; seq tells it from a later
// record of the same id.
type goneRef struct{ id, seq uint64 }

// goneTable holds the records; guarded by table.mapMu.
type goneTable struct {
	byID  map[uint64]goneNode
	byIno map[uint64]uint64 // inode number -> id
	queue []goneRef         // oldest first; records taken since linger until they reach the front
	seq   uint64
}

// rememberLocked records where n, being evicted, was. Caller holds mapMu.
func (t *table) rememberLocked(n *Node) {
	if len(n.links) == 0 {
		return
	}
	g := &t.gone
	if g.byID == nil {
		g.byID, g.byIno = map[uint64]goneNode{}, map[uint64]uint64{}
	}
	for len(g.byID) >= maxGone || len(g.queue) >= 2*maxGone {
		r := g.queue[0]
		g.queue = g.queue[1:]
		if rec, ok := g.byID[r.id]; ok && rec.seq == r.seq {
			t.dropGoneLocked(r.id, rec)
		}
	}
	g.seq++
	l := n.links[0]
	g.byID[n.id] = goneNode{parent: l.parent.id, name: l.name, ino: n.ino, typ: n.typ, seq: g.seq}
	g.byIno[n.ino] = n.id
	g.queue = append(g.queue, goneRef{n.id, g.seq})
}

func (t *table) dropGoneLocked(id uint64, rec goneNode) {
	delete(t.gone.byID, id)
	if t.gone.byIno[rec.ino] == id {
		delete(t.gone.byIno, rec.ino)
	}
}

// takeGoneLocked takes the record of the evicted node of inode ino and
// type typ, and returns its id; 0 if there is none. Caller holds mapMu.
func (t *table) takeGoneLocked(ino uint64, typ uint32) uint64 {
	id, ok := t.gone.byIno[ino]
	if !ok {
		return 0
	}
	rec := t.gone.byID[id]
	t.dropGoneLocked(id, rec)
	if rec.typ != typ {
		return 0
	}
	return id
}

// goneRecord returns the record of evicted node id.
func (t *table) goneRecord(id uint64) (goneNode, bool) {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	rec, ok := t.gone.byID[id]
	return rec, ok
}

// dropGone forgets the record of id, found stale.
func (t *table) dropGone(id uint64) {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	if rec, ok := t.gone.byID[id]; ok {
		t.dropGoneLocked(id, rec)
	}
}

// pin returns live node id with one more kernel reference (so it is not
// evicted meanwhile), or nil.
func (t *table) pin(id uint64) *Node {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	n := t.byID[id]
	if n != nil {
		n.lookups++
		n.forgotten = false
	}
	return n
}

// pinParent returns n's parent (n itself for the root) with one more
// kernel reference, or nil if n has no name left.
func (t *table) pinParent(n *Node) *Node {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	p := n
	if n != t.root {
		if len(n.links) == 0 {
			return nil
		}
		p = n.links[0].parent
	}
	p.lookups++
	p.forgotten = false
	return p
}

// LookupID answers the kernel's LOOKUP of "." in node id: the node, live
// or evicted with a name left, with one more kernel reference.
func (f *FS) LookupID(id uint64) (*Node, Attr, error) {
	if n := f.table.pin(id); n != nil {
		a, err := f.stat(n)
		if err != nil {
			f.table.forget(n, 1)
			return nil, Attr{}, err
		}
		return n, a, nil
	}
	f.table.mu.RLock()
	defer f.table.mu.RUnlock()
	return f.revive(id, 0)
}

// LookupParent answers the kernel's LOOKUP of ".." in directory n: its
// parent, with one more kernel reference.
func (f *FS) LookupParent(n *Node) (*Node, Attr, error) {
	p := f.table.pinParent(n)
	if p == nil {
		return nil, Attr{}, ErrStale
	}
	a, err := f.stat(p)
	if err != nil {
		f.table.forget(p, 1)
		return nil, Attr{}, err
	}
	return p, a, nil
}

// revive binds evicted node id again at the name its record gives, with
// one kernel reference, reviving its evicted parents on the way. The
// caller holds table.mu shared.
func (f *FS) revive(id uint64, depth int) (*Node, Attr, error) {
	rec, ok := f.table.goneRecord(id)
	if !ok || depth > journal.MaxPath/2 {
		return nil, Attr{}, ErrStale
	}
	parent := f.table.pin(rec.parent)
	if parent == nil {
		var err error
		if parent, _, err = f.revive(rec.parent, depth+1); err != nil {
			return nil, Attr{}, err
		}
	}
	defer f.table.forget(parent, 1)
	pp, err := f.nodePath(parent)
	if err != nil {
		return nil, Attr{}, err
	}
	var st unix.Stat_t
	p := childPath(pp, rec.name)
	if err := unix.Fstatat(f.root, p, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Ino != rec.ino || st.Mode&unix.S_IFMT != rec.typ {
		f.table.dropGone(id)
		return nil, Attr{}, ErrStale
	}
	n := f.table.bind(parent, rec.name, st.Ino, rec.typ, 1)
	if n.id != id {
		f.table.forget(n, 1)
		return nil, Attr{}, ErrStale
	}
	return n, attrFromStat(&st), nil
}
