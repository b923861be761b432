package fstest

import (
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/manifest"
	"github.com/pbfs/pbfs/internal/xattr"
)

// Entry is what a comparison looks at for one path.
type Entry struct {
	Type   string
	Mode   uint32 // permission bits with setuid, setgid and sticky
	UID    uint32
	GID    uint32
	Size   int64
	Hash   string // manifest digest of the contents (regular files)
	Target string // symlink target
	Rdev   uint64
	Xattrs string // every extended attribute (user, trusted, security...), sorted name=value list
	Links  string // other names of the same inode, sorted
	Mtime  int64  // modification time, ns
	Alloc  string // regular files: where they hold space (alloc.go); compared where both sides can say
}

// Tree maps relative paths to entries.
type Tree map[string]Entry

// Snapshot reads dir completely: names, types, contents, sizes, modes,
// owners, symlink targets, device numbers, extended attributes (of every
// namespace, on every type), hard-link groups, modification times and
// where regular files hold space (alloc.go).
// Access and change times are not compared: pbfs replicates neither.
func Snapshot(t testing.TB, dir string) Tree {
	t.Helper()
	tree, err := ReadTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// ReadTree is Snapshot for a goroutine that is not the test's own: it
// returns the error instead of failing the test.
func ReadTree(dir string) (Tree, error) {
	tree := Tree{}
	inodes := map[uint64][]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		e := Entry{Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid, Mtime: st.Mtim.Nano()}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			e.Type, e.Size = "file", st.Size
			h, err := hashFile(p)
			if err != nil {
				return err
			}
			e.Hash = h
			e.Alloc = allocOf(p, st.Size)
		case unix.S_IFDIR:
			e.Type = "dir"
		case unix.S_IFLNK:
			e.Type = "symlink"
			e.Target, err = os.Readlink(p)
			if err != nil {
				return err
			}
		default:
			e.Type, e.Rdev = fmt.Sprintf("special(%o)", st.Mode&unix.S_IFMT), st.Rdev
		}
		e.Xattrs = xattrs(p)
		if e.Type != "dir" && st.Nlink > 1 {
			inodes[st.Ino] = append(inodes[st.Ino], rel)
		}
		tree[rel] = e
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	for _, names := range inodes {
		sort.Strings(names)
		for _, n := range names {
			e := tree[n]
			e.Links = strings.Join(names, ",")
			tree[n] = e
		}
	}
	return tree, nil
}

// hashFile is the file's manifest digest, which reads only the blocks that
// hold data: a sparse file of a terabyte compares in microseconds.
func hashFile(p string) (string, error) {
	sum, err := manifest.DigestFile(p)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(sum[:12]), nil
}

func xattrs(p string) string {
	all, _ := xattr.All(p)
	var out []string
	for name, v := range all {
		out = append(out, name+"="+string(v))
	}
	sort.Strings(out)
	return strings.Join(out, ";")
}

// Names lists the paths of either tree, sorted.
func Names(want, got Tree) []string {
	var names []string
	for n := range want {
		names = append(names, n)
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Diff lists the differences between two trees, at most max of them.
func Diff(want, got Tree, max int) []string {
	var out []string
	for _, n := range Names(want, got) {
		w, wok := want[n]
		g, gok := got[n]
		switch {
		case !gok:
			out = append(out, fmt.Sprintf("%s: missing (want %+v)", n, w))
		case !wok:
			out = append(out, fmt.Sprintf("%s: unexpected (got %+v)", n, g))
		case !w.same(g):
			out = append(out, fmt.Sprintf("%s:\n\twant %+v\n\tgot  %+v", n, w, g))
		}
		if len(out) >= max {
			break
		}
	}
	return out
}

// same reports whether two entries agree: in everything, and in their
// allocation where both could be mapped on the same kind of file system.
func (w Entry) same(g Entry) bool {
	if w.Size != g.Size || !sameAlloc(w.Alloc, g.Alloc, w.Size) {
		return false
	}
	w.Alloc, g.Alloc = "", ""
	return w == g
}

// RequireEqual fails t if the trees differ.
func RequireEqual(t testing.TB, want, got Tree, what string) {
	t.Helper()
	if d := Diff(want, got, 20); len(d) > 0 {
		t.Fatalf("%s: trees differ (%d entries vs %d):\n%s", what, len(want), len(got), strings.Join(d, "\n"))
	}
}

// AwaitEqual waits up to 20 s for the tree at got to equal the one at
// want (a backup still applying what the primary sent), and fails t with
// the differences if it does not.
func AwaitEqual(t testing.TB, want, got string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		diff := Diff(Snapshot(t, want), Snapshot(t, got), 5)
		if len(diff) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s differs from %s: %v", got, want, diff)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CopyTree copies src into dst (which must exist), preserving modes,
// owners, symlinks, hard links, user xattrs and allocation (copyFile).
func CopyTree(t testing.TB, src, dst string) {
	t.Helper()
	links := map[uint64]string{}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if rel != "." {
				if err := os.Mkdir(to, 0o700); err != nil {
					return err
				}
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		case unix.S_IFREG:
			if first, ok := links[st.Ino]; ok && st.Nlink > 1 {
				return os.Link(first, to)
			}
			links[st.Ino] = to
			if err := copyFile(p, to, st.Size); err != nil {
				return err
			}
		default:
			if err := unix.Mknod(to, st.Mode, int(st.Rdev)); err != nil {
				return err
			}
		}
		if err := unix.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			if err := unix.Chmod(to, st.Mode&0o7777); err != nil {
				return err
			}
		}
		for _, kv := range strings.Split(xattrs(p), ";") {
			if name, val, ok := strings.Cut(kv, "="); ok {
				if err := unix.Lsetxattr(to, name, []byte(val), 0); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
	copyTimes(t, src, dst)
}

// copyTimes gives every entry of dst the mtime of the same path in src,
// directories after their entries (creating those changed them).
func copyTimes(t testing.TB, src, dst string) {
	t.Helper()
	var paths []string
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			paths = append(paths, p)
		}
		return nil
	})
	for i := len(paths) - 1; i >= 0; i-- { // children before parents
		var st unix.Stat_t
		if unix.Lstat(paths[i], &st) != nil {
			continue
		}
		rel, _ := filepath.Rel(src, paths[i])
		ts := []unix.Timespec{st.Atim, st.Mtim}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dst, rel), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatalf("copy times of %s: %v", rel, err)
		}
	}
}
