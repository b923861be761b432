// Package treecmp compares a primary's volume with a backup's, path by
// path: what every benchmark checks before it trusts its numbers.
package treecmp

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// node is what Compare checks of one path.
type node struct {
	typ    string
	perm   uint32
	uid    uint32
	gid    uint32
	size   int64
	sum    string // regular files: sha256 of the content
	target string // symlinks
	xattrs string // user.* names and values
	links  string // regular files with nlink > 1: every path of the inode
	mtime  int64
}

func (n node) String() string {
	return fmt.Sprintf("%s perm=%o uid=%d gid=%d size=%d sum=%.12s target=%q xattrs=%q links=%q",
		n.typ, n.perm, n.uid, n.gid, n.size, n.sum, n.target, n.xattrs, n.links)
}

// equal ignores mtimes, which Compare counts on their own.
func (n node) equal(o node) bool {
	n.mtime, o.mtime = 0, 0
	return n == o
}

// snapshotTree reads every path under dir: type, permissions, owner, size,
// content hash, symlink target, user xattrs and hard-link groups.
func snapshotTree(dir string) (map[string]node, int64, error) {
	out := map[string]node{}
	inodes := map[uint64][]string{}
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n := node{perm: st.Mode & 0o7777, uid: st.Uid, gid: st.Gid, mtime: st.Mtim.Nano()}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			n.typ = "dir"
		case unix.S_IFLNK:
			n.typ = "symlink"
			if n.target, err = os.Readlink(p); err != nil {
				return err
			}
		case unix.S_IFREG:
			n.typ, n.size = "file", st.Size
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			k, err := io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			total += k
			n.sum = hex.EncodeToString(h.Sum(nil))
			if st.Nlink > 1 {
				inodes[st.Ino] = append(inodes[st.Ino], rel)
			}
		default:
			n.typ = fmt.Sprintf("mode %o", st.Mode&unix.S_IFMT)
		}
		if n.typ != "symlink" {
			n.xattrs = userXattrs(p)
		}
		if rel == "." {
			n.perm, n.uid, n.gid, n.mtime = 0, 0, 0, 0 // the roots are different directories
		}
		out[rel] = n
		return nil
	})
	for _, paths := range inodes {
		sort.Strings(paths)
		for _, p := range paths {
			n := out[p]
			n.links = strings.Join(paths, ",")
			out[p] = n
		}
	}
	return out, total, err
}

func userXattrs(p string) string {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n == 0 {
		return ""
	}
	var parts []string
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		v := make([]byte, 64<<10)
		k, err := unix.Lgetxattr(p, name, v)
		if err == nil {
			parts = append(parts, name+"="+string(v[:k]))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ";")
}

// Comparison is the outcome of Compare.
type Comparison struct {
	Paths      int
	Bytes      int64 // content bytes hashed on the primary
	Diffs      []string
	MtimeFiles int // regular files whose mtime differs (reported, not a failure)
	MtimeDirs  int
}

// OK reports whether the trees are equal.
func (c Comparison) OK() bool { return len(c.Diffs) == 0 }

// Compare compares the backup's volume with the primary's.
func Compare(primary, backup string) (Comparison, error) {
	var c Comparison
	want, total, err := snapshotTree(primary)
	if err != nil {
		return c, fmt.Errorf("read %s: %w", primary, err)
	}
	got, _, err := snapshotTree(backup)
	if err != nil {
		return c, fmt.Errorf("read %s: %w", backup, err)
	}
	c.Paths, c.Bytes = len(want), total
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		w, inW := want[k]
		g, inG := got[k]
		switch {
		case !inG:
			c.Diffs = append(c.Diffs, fmt.Sprintf("%s: missing on the backup (primary: %s)", k, w))
		case !inW:
			c.Diffs = append(c.Diffs, fmt.Sprintf("%s: only on the backup (%s)", k, g))
		case !w.equal(g):
			c.Diffs = append(c.Diffs, fmt.Sprintf("%s: primary %s; backup %s", k, w, g))
		case w.mtime != g.mtime && w.typ == "file":
			c.MtimeFiles++
		case w.mtime != g.mtime && w.typ == "dir":
			c.MtimeDirs++
		}
	}
	return c, nil
}
