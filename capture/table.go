package capture

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pbfs/pbfs/journal"
)

// RootID is the node id of the volume root.
const RootID = 1

// Node is one file of the volume as the kernel and the journal know it.
// Its id is the fid that ops carry: one per inode, kept for the life of
// the mount, never reused.
type Node struct {
	id  uint64
	ino uint64
	typ uint32 // S_IFMT bits

	// mu serializes data and metadata ops on the file and guards log.
	mu  sync.Mutex
	log *journal.DataLog
	// mtimeDirty: a write, fallocate or truncate of the open batch moved
	// the file's mtime, which the seal reads (mtime.go). Set under mu and
	// sealMu shared, read and cleared under sealMu exclusive.
	mtimeDirty bool

	// noCaps: the file has no security.capability: this mount created
	// it, or a kill found none, and none was set through the mount since
	// (see Getxattr and killPrivAt).
	noCaps atomic.Bool
	// local: the file is local-only (local.go); set when the node is
	// made, never changed (renames do not cross classes).
	local atomic.Bool
	// aclBatch is 1 + the open batch's number (FS.batch) when this
	// directory's default ACL was set or removed during it (acl.go).
	aclBatch atomic.Uint64
	// paged: the kernel may hold pages of the file in its page cache
	// (MarkPaged, TakePaged).
	paged atomic.Bool

	// Guarded by table.mapMu.
	links     []dentry
	lookups   uint64
	handles   []*Handle
	children  int // dentries whose parent is this node
	forgotten bool
	// timePending: the open batch changed its entries, and the seal reads
	// its mtime (FS.reread); it is not evicted before then, or the seal
	// would find no node and the backup keep its own time.
	timePending bool
}

// ID returns the node id (the fid).
func (n *Node) ID() uint64 { return n.id }

// IsDir reports whether the node is a directory.
func (n *Node) IsDir() bool { return n.typ == sIFDIR }

// MarkPaged notes that the kernel may cache pages of the file: the FUSE
// binding calls it before it serves a read or write through the page
// cache.
func (n *Node) MarkPaged() {
	if !n.paged.Load() {
		n.paged.Store(true)
	}
}

// TakePaged reports whether the kernel may cache pages of the file, and
// clears the mark: the binding calls it after a write that bypassed the
// page cache, and drops the pages it wrote past if so.
func (n *Node) TakePaged() bool { return n.paged.Load() && n.paged.Swap(false) }

type dentry struct {
	parent *Node
	name   string
}

type dentryKey struct {
	parent uint64
	name   string
}

// table maps node ids, backing inode numbers and names to nodes.
type table struct {
	mu    sync.RWMutex // the namespace lock, see the package comment
	mapMu sync.Mutex
	byID  map[uint64]*Node
	byIno map[uint64]*Node
	names map[dentryKey]*Node
	next  atomic.Uint64
	root  *Node
	// longest bounds the length of every known node's path (depth.go).
	longest atomic.Int64
	local   Classifier // nil: nothing is local-only (local.go)
	gone    goneTable  // where evicted nodes were (gone.go); guarded by mapMu
}

func newTable(rootIno uint64) *table {
	t := &table{byID: map[uint64]*Node{}, byIno: map[uint64]*Node{}, names: map[dentryKey]*Node{}}
	t.next.Store(RootID)
	t.root = &Node{id: RootID, ino: rootIno, typ: sIFDIR, lookups: 1}
	t.byID[RootID], t.byIno[rootIno] = t.root, t.root
	return t
}

func (t *table) get(id uint64) *Node {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	return t.byID[id]
}

// pathLocked returns a current path of n, or false if n has no name left.
// Caller holds mapMu.
func (t *table) pathLocked(n *Node) (string, bool) {
	if n == t.root {
		return ".", true
	}
	var parts []string
	for n != t.root {
		if len(n.links) == 0 || len(parts) > 4096 {
			return "", false
		}
		l := n.links[0]
		parts = append(parts, l.name)
		n = l.parent
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, "/"), true
}

func (t *table) path(n *Node) (string, bool) {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	return t.pathLocked(n)
}

// childPath joins a directory's path and a name.
func childPath(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// bind records that name in parent is n, with kernel lookup count +lookups,
// creating the node for a new inode. Caller holds mu (shared or exclusive).
func (t *table) bind(parent *Node, name string, ino uint64, typ uint32, lookups uint64) *Node {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	key := dentryKey{parent.id, name}
	n := t.byIno[ino]
	if n != nil && n.typ != typ {
		t.dropInoLocked(n)
		n = nil
	}
	if n == nil {
		id := t.takeGoneLocked(ino, typ) // the id it had before its eviction
		if id == 0 {
			id = t.next.Add(1)
		}
		n = &Node{id: id, ino: ino, typ: typ}
		t.byID[n.id], t.byIno[ino] = n, n
		t.classifyNew(n, parent, name)
	}
	if old := t.names[key]; old != n {
		if old != nil {
			t.unlinkLocked(old, parent, name, false)
		}
		t.names[key] = n
		n.links = append(n.links, dentry{parent, name})
		parent.children++
	}
	n.lookups += lookups
	n.forgotten = n.lookups == 0
	return n
}

// bindNew binds a file this mount just made. Its inode is new, so a node
// the table still holds for that number belongs to a dead file whose
// inode the backing file system handed on (ext4 does at once): that node
// keeps serving the kernel's references to the dead file, and the new
// file gets a node of its own, with none of the dead one's state (pending
// ops, class, locks).
func (t *table) bindNew(parent *Node, name string, ino uint64, typ uint32, lookups uint64) *Node {
	t.mapMu.Lock()
	if old := t.byIno[ino]; old != nil {
		t.dropInoLocked(old)
	}
	if id, ok := t.gone.byIno[ino]; ok {
		t.dropGoneLocked(id, t.gone.byID[id]) // a dead file's, as above
	}
	t.mapMu.Unlock()
	return t.bind(parent, name, ino, typ, lookups)
}

// lookupName returns the node bound to name in parent, if any.
func (t *table) lookupName(parent *Node, name string) *Node {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	return t.names[dentryKey{parent.id, name}]
}

// unlink forgets that name in parent is n. It reports whether n still has
// a known name. With survives (the inode keeps links the table does not
// know of), a node left without a known name keeps its inode number, so
// that findName binds the surviving name to this node, with its pending
// ops: writes made through the removed name changed the surviving one.
func (t *table) unlink(n, parent *Node, name string, survives bool) bool {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	t.unlinkLocked(n, parent, name, survives)
	return len(n.links) > 0
}

func (t *table) unlinkLocked(n, parent *Node, name string, survives bool) {
	delete(t.names, dentryKey{parent.id, name})
	for i, l := range n.links {
		if l.parent == parent && l.name == name {
			n.links = append(n.links[:i], n.links[i+1:]...)
			parent.children--
			break
		}
	}
	if len(n.links) == 0 && n.typ != sIFDIR {
		// Keep byIno while handles are open or the inode lives on; a later
		// inode with the same number must still get a new node once this
		// one is gone.
		if len(n.handles) == 0 && !survives {
			t.dropInoLocked(n)
		}
	}
	t.maybeEvictLocked(parent)
}

func (t *table) dropInoLocked(n *Node) {
	if t.byIno[n.ino] == n {
		delete(t.byIno, n.ino)
	}
}

// move renames the dentry (op, oname) to (np, nname); the caller has
// already unbound whatever (np, nname) named.
func (t *table) move(n, op *Node, oname string, np *Node, nname string) {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	delete(t.names, dentryKey{op.id, oname})
	for i := range n.links {
		if n.links[i].parent == op && n.links[i].name == oname {
			n.links[i] = dentry{np, nname}
			break
		}
	}
	op.children--
	np.children++
	t.names[dentryKey{np.id, nname}] = n
}

// forget drops count kernel references to n and evicts it when nothing
// needs it any more.
func (t *table) forget(n *Node, count uint64) {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	if count > n.lookups {
		count = n.lookups
	}
	n.lookups -= count
	if n.lookups == 0 && n != t.root {
		n.forgotten = true
		t.maybeEvictLocked(n)
	}
}

// maybeEvictLocked removes a node the kernel forgot, that has no open
// handles, no known children and no pending ops, then tries its parents.
func (t *table) maybeEvictLocked(n *Node) {
	for n != nil && n != t.root && n.forgotten && n.lookups == 0 && len(n.handles) == 0 && n.children == 0 && !n.timePending {
		if !n.mu.TryLock() {
			return
		}
		dirty := n.log != nil
		n.mu.Unlock()
		if dirty {
			return // the seal sweeps it
		}
		delete(t.byID, n.id)
		t.dropInoLocked(n)
		t.rememberLocked(n)
		var parent *Node
		for _, l := range n.links {
			delete(t.names, dentryKey{l.parent.id, l.name})
			l.parent.children--
			parent = l.parent
		}
		n.links = nil
		n.forgotten = false
		n = parent
	}
}

func (t *table) addHandle(h *Handle) {
	t.mapMu.Lock()
	h.node.handles = append(h.node.handles, h)
	t.mapMu.Unlock()
}

func (t *table) removeHandle(h *Handle) {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	n := h.node
	for i, x := range n.handles {
		if x == h {
			n.handles = append(n.handles[:i], n.handles[i+1:]...)
			break
		}
	}
	if len(n.handles) == 0 && len(n.links) == 0 && n.typ != sIFDIR {
		t.dropInoLocked(n)
	}
	t.maybeEvictLocked(n)
}

// mappable reports whether a handle of n open for reading and writing is
// open (one that can be mapped shared and writable).
func (t *table) mappable(n *Node) bool {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	for _, h := range n.handles {
		if h.mappable {
			return true
		}
	}
	return false
}

// anyFd returns an open backing fd of n, or -1.
func (t *table) anyFd(n *Node) int {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	for _, h := range n.handles {
		if h.fd >= 0 {
			return h.fd
		}
	}
	return -1
}

// count reports how many nodes the table holds.
func (t *table) count() int {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	return len(t.byID)
}

// exchange swaps the dentries of a and b (RENAME_EXCHANGE).
func (t *table) exchange(a, ap *Node, an string, b, bp *Node, bn string) {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	for i := range a.links {
		if a.links[i].parent == ap && a.links[i].name == an {
			a.links[i] = dentry{bp, bn}
			break
		}
	}
	for i := range b.links {
		if b.links[i].parent == bp && b.links[i].name == bn {
			b.links[i] = dentry{ap, an}
			break
		}
	}
	t.names[dentryKey{ap.id, an}], t.names[dentryKey{bp.id, bn}] = b, a
}

// sweep evicts nodes that were kept only because they had pending ops or
// a pending time.
func (t *table) sweep(nodes []*Node) {
	t.mapMu.Lock()
	defer t.mapMu.Unlock()
	for _, n := range nodes {
		t.maybeEvictLocked(n)
	}
}
