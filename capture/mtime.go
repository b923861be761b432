package capture

import (
	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// Modification times are replicated as the primary's backing file system
// recorded them, not as a backup's clock would set them when it applies:
// services and tools rely on them (PHP's opcache, make, rsync, backups).
//
//   - A write, truncate or fallocate marks the file (mtimeDirty); the
//     seal, while every mutation waits, reads the file's mtime once and
//     records it as a utimens that leaves the atime alone, after the
//     file's other ops, so a replay ends with the file's last mtime. An
//     fstat after every write, which this replaced, cost the mount 25 µs
//     of CPU and 0.6 context switches per fdatasync'd 4 KiB write on the
//     2-vCPU test machine (docs/PERFORMANCE.md). A truncate through
//     setattr records the time its own stat returned.
//   - A new file, directory, symlink or device records its mtime at birth.
//   - A directory whose entries a batch changed gets its mtime, read at the
//     seal (while every mutation waits), at the very end of the batch,
//     after every op that changes it on a backup.
//
// Access times are not replicated (a copy that is read differs there
// anyway), nor ctimes (no syscall sets them).

// mtimeLog records st's mtime for n; the caller holds n.mu and sealMu.
func (f *FS) mtimeLog(n *Node, st *unix.Stat_t) {
	if f.captures(n) {
		f.metaLog(n, journal.Op{Kind: journal.KindUtimens, Atime: journal.OmitTime, Mtime: timespecNano(st.Mtim)})
	}
}

// mtimeAtSeal notes that n's data changed its mtime, for the seal to
// read; the caller holds n.mu and sealMu.
func (f *FS) mtimeAtSeal(n *Node) {
	if f.captures(n) {
		n.mtimeDirty = true
	}
}

// sealMtime records, in the file's log, the mtime a file marked by
// mtimeAtSeal has now at p. The caller holds sealMu exclusively and
// table.mapMu.
func (f *FS) sealMtime(n *Node, log *journal.DataLog, p string) {
	n.mtimeDirty = false
	var st unix.Stat_t
	if unix.Fstatat(f.root, p, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		log.Meta(journal.Op{Kind: journal.KindUtimens, Atime: journal.OmitTime, Mtime: timespecNano(st.Mtim)})
	}
}

// bornTime records the mtime a create-kind op gave the new node n. The
// caller holds table.mu exclusively. n is new to the kernel, which learns
// of it only from this reply, so nobody should hold its lock; if someone
// does all the same, its time is read at the seal instead of waiting here
// under the namespace lock.
func (f *FS) bornTime(n *Node, st *unix.Stat_t) {
	if !n.mu.TryLock() {
		f.rereadTime(n.id)
		return
	}
	f.mtimeLog(n, st)
	n.mu.Unlock()
}

// touched notes that ns op changed its directories' entries; the caller
// holds table.mu exclusively.
func (f *FS) touched(op *journal.Op) {
	f.rereadTime(op.Parent)
	f.rereadTime(op.Parent2)
}

// rereadTime notes that node id's mtime (a directory's, usually) may have
// changed in the open batch, to be read at the seal; the caller holds
// table.mu exclusively.
func (f *FS) rereadTime(id uint64) {
	if id == 0 || !f.opts.Capture {
		return
	}
	if f.reread == nil {
		f.reread = map[uint64]struct{}{}
	}
	f.reread[id] = struct{}{}
	f.table.mapMu.Lock()
	if n := f.table.byID[id]; n != nil {
		n.timePending = true
	}
	f.table.mapMu.Unlock()
}

// rereadTimes returns a utimens op for every node in dirs that still has a
// name, with the mtime it has now, and the nodes, no longer pinned, for
// the seal to sweep. The caller holds sealMu exclusively and table.mapMu.
func (f *FS) rereadTimes(dirs map[uint64]struct{}) (out []journal.Op, nodes []*Node) {
	for id := range dirs {
		n := f.table.byID[id]
		if n == nil {
			continue
		}
		n.timePending = false
		nodes = append(nodes, n)
		if n.localNode() {
			continue
		}
		p, ok := f.table.pathLocked(n)
		if !ok {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(f.root, p, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		out = append(out, journal.Op{Kind: journal.KindUtimens, Fid: id, Path: p, Atime: journal.OmitTime, Mtime: timespecNano(st.Mtim)})
	}
	return out, nodes
}
