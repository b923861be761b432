package capture

import "golang.org/x/sys/unix"

// maxFindEntries bounds the tree walk findName makes.
const maxFindEntries = 1 << 20

// findName looks for another name of n after its last known one went away
// while the inode still has links (a pre-existing hard link the kernel
// never looked up). Without a name, later writes through open handles
// could not be addressed, yet they change the surviving link. The caller
// holds table.mu exclusively.
func (f *FS) findName(n *Node) {
	seen := 0
	var walk func(dir *Node, path string) bool
	walk = func(dir *Node, path string) bool {
		fd, err := unix.Openat(f.root, path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return false
		}
		ents, err := readDirents(fd, false)
		unix.Close(fd)
		if err != nil {
			return false
		}
		for _, e := range ents {
			if seen++; seen > maxFindEntries {
				return false
			}
			if e.Ino == n.ino && e.Type != unix.DT_DIR {
				f.table.notePath(len(childPath(path, e.Name)))
				f.table.bind(dir, e.Name, n.ino, n.typ, 0)
				return true
			}
		}
		for _, e := range ents {
			if e.Type != unix.DT_DIR {
				continue
			}
			var st unix.Stat_t
			cp := childPath(path, e.Name)
			if unix.Fstatat(f.root, cp, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			f.table.notePath(len(cp))
			child := f.table.bind(dir, e.Name, st.Ino, unix.S_IFDIR, 0)
			if walk(child, cp) {
				return true
			}
		}
		return false
	}
	if !walk(f.table.root, ".") {
		f.table.mapMu.Lock()
		if len(n.links) == 0 && len(n.handles) == 0 {
			f.table.dropInoLocked(n) // as unlink would have
		}
		f.table.mapMu.Unlock()
		f.log.Warn("no surviving name found for a hard-linked file; its later writes are not captured", "fid", n.id, "ino", n.ino)
		f.m.LostNames.Inc()
	}
}
