package apply

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/sparse"
	"github.com/pbfs/pbfs/internal/xattr"
	"github.com/pbfs/pbfs/journal"
)

// Spec is what a path must be after a resync.
type Spec struct {
	Path   string
	Mode   uint32 // st_mode
	UID    uint32
	GID    uint32
	Size   uint64
	Target string
	Rdev   uint64
	Xattrs map[string][]byte
	LinkTo string
	Mtime  int64 // nanoseconds since the epoch
	// MatchAlloc: Alloc is where the primary's file holds space
	// (sparse.Map), which the copy gets too (alloc.go). Without it, from
	// a primary that sends no map, zeros become holes.
	MatchAlloc bool
	Alloc      []sparse.AllocExtent
}

func (s *Spec) typ() uint32 { return s.Mode & unix.S_IFMT }

// Reconciler makes the target equal to a stream of Specs (a resync), all
// through the same os.Root as Apply: nothing outside the target is touched.
type Reconciler struct {
	a       *Applier
	seen    map[string]bool
	claimed map[uint64]string // inode -> the name that owns it in this resync
	fresh   map[string]bool   // files this resync created
	dirs    []Spec
	open    []string // directories whose entries are still coming (sweep.go)
	cur     *Spec    // the regular file whose blocks are coming
	Changed int      // paths created, replaced or whose data differed
	Removed int
	Foreign int // directories left alone: not the volume's (guard.go)

	// subtrees, if set, limits the resync to them (scope.go); nil: the
	// whole volume.
	subtrees map[string]bool
}

// Reconciler starts a resync of the target.
func (a *Applier) Reconciler() *Reconciler {
	a.files.drop() // the resync changes names under the applier
	return &Reconciler{a: a, seen: map[string]bool{".": true}, claimed: map[uint64]string{}, fresh: map[string]bool{}, open: []string{"."}}
}

// BlockSum is the checksum resyncs compare blocks by.
func BlockSum(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:16]
}

// Resyncs keep holes holes: a block that is a hole on the primary travels
// as an empty checksum (HoleSum), is never read or sent, and is punched on
// the backup if the backup has data there. A resync used to read the holes
// of sparse files as zeros and write them out: 1.7 GB of sparse files took
// 7.3 GB on the backup.

// HoleSum is the checksum a resync sends for a block that is all hole.
var HoleSum = []byte{}

// IsHole reports whether a block checksum stands for a hole.
func IsHole(sum []byte) bool { return len(sum) == 0 }

// Ensure makes s.Path exist with the right type (not yet its data or
// metadata, see Finish). It reports whether the path is a regular file
// whose data must be compared.
func (r *Reconciler) Ensure(s *Spec) (bool, error) {
	r.cur = s
	compare, err := r.ensure(s)
	if outOfRoom(err) && r.sweepOpen() {
		compare, err = r.ensure(s)
	}
	return compare, err
}

func (r *Reconciler) ensure(s *Spec) (bool, error) {
	if s.Path == "." {
		// The root: only its metadata, set last (Done).
		if s.typ() != unix.S_IFDIR || s.LinkTo != "" {
			return false, fmt.Errorf("resync root of mode %#o: %w", s.Mode, ErrInvalidOp)
		}
		r.seen["."] = true
		return false, nil
	}
	if !journal.ValidPath(s.Path) || (s.LinkTo != "" && !journal.ValidPath(s.LinkTo)) {
		return false, fmt.Errorf("resync path %q: %w", s.Path, ErrInvalidOp)
	}
	r.seen[s.Path] = true
	if err := r.closeDirs(s.Path); err != nil {
		return false, err
	}
	if s.typ() == unix.S_IFDIR && s.LinkTo == "" && r.inScope(s.Path) {
		r.open = append(r.open, s.Path)
	}
	root := r.a.root
	fi, err := root.Lstat(s.Path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	var st *syscall.Stat_t // what os.FileInfo.Sys holds
	if exists {
		st, _ = fi.Sys().(*syscall.Stat_t)
	}
	if s.LinkTo != "" {
		return false, r.ensureLink(s, st, exists)
	}
	if exists && st != nil && st.Mode&unix.S_IFMT == s.typ() && (s.typ() != unix.S_IFLNK || r.readlink(s.Path) == s.Target) &&
		(s.typ() == unix.S_IFREG || s.typ() == unix.S_IFDIR || s.typ() == unix.S_IFLNK || st.Rdev == s.Rdev) {
		if s.typ() != unix.S_IFREG {
			return false, nil
		}
		if owner, taken := r.claimed[st.Ino]; !taken || owner == s.Path {
			r.claimed[st.Ino] = s.Path
			return true, nil
		}
		// The inode already belongs to an earlier name that the primary
		// does not link this one to: this name gets a file of its own.
		if err := root.Remove(s.Path); err != nil {
			return false, err
		}
		exists = false
	}
	if exists {
		if err := r.a.removeAll(s.Path); err != nil {
			return false, err
		}
	}
	r.Changed++
	return r.create(s)
}

// ensureLink makes s.Path a hard link to s.LinkTo, unless it is one
// already (st: what the path holds now, if exists).
func (r *Reconciler) ensureLink(s *Spec, st *syscall.Stat_t, exists bool) error {
	root := r.a.root
	var lt syscall.Stat_t
	li, err := root.Lstat(s.LinkTo)
	if err != nil {
		return fmt.Errorf("resync link %s: %w", s.Path, err)
	}
	if lst, ok := li.Sys().(*syscall.Stat_t); ok {
		lt = *lst
	}
	if exists && st != nil && st.Ino == lt.Ino && st.Dev == lt.Dev {
		return nil
	}
	if exists {
		if err := r.a.removeAll(s.Path); err != nil {
			return err
		}
	}
	r.Changed++
	return root.Link(s.LinkTo, s.Path)
}

// create makes a new entry of s's type at s.Path (a directory with no
// permissions for others yet: its metadata is set when it is done). It
// reports whether the entry is a regular file whose blocks follow.
func (r *Reconciler) create(s *Spec) (bool, error) {
	root := r.a.root
	switch s.typ() {
	case unix.S_IFDIR:
		return false, root.Mkdir(s.Path, 0o700)
	case unix.S_IFLNK:
		return false, root.Symlink(s.Target, s.Path)
	case unix.S_IFREG:
		f, err := root.OpenFile(s.Path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return false, err
		}
		r.fresh[s.Path] = true
		if fi, err := f.Stat(); err == nil {
			if nst, ok := fi.Sys().(*syscall.Stat_t); ok {
				r.claimed[nst.Ino] = s.Path
			}
		}
		return true, f.Close()
	default:
		d, err := root.OpenFile(parentDir(s.Path), os.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return false, err
		}
		defer d.Close()
		return false, unix.Mknodat(int(d.Fd()), path.Base(s.Path), s.Mode, int(s.Rdev))
	}
}

func (r *Reconciler) readlink(p string) string {
	t, _ := r.a.root.Readlink(p)
	return t
}

// Fresh reports whether this resync created p (and counted it changed).
func (r *Reconciler) Fresh(p string) bool { return r.fresh[p] }

// Finish sets s's size and metadata; directories get theirs at Done, after
// their entries stopped changing.
func (r *Reconciler) Finish(s *Spec) error {
	if s.LinkTo != "" {
		return nil
	}
	if s.typ() == unix.S_IFDIR {
		r.dirs = append(r.dirs, *s)
		return nil
	}
	if s.typ() == unix.S_IFREG {
		if err := r.finishData(s); err != nil {
			return err
		}
	}
	return r.meta(s)
}

func (r *Reconciler) meta(s *Spec) error {
	root := r.a.root
	if err := root.Lchown(s.Path, int(s.UID), int(s.GID)); err != nil {
		return err
	}
	if s.typ() != unix.S_IFLNK {
		if err := root.Chmod(s.Path, fileMode(s.Mode)); err != nil {
			return err
		}
	}
	if err := r.xattrs(s); err != nil {
		return err
	}
	d, err := root.OpenFile(parentDir(s.Path), os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(s.Mtime)}
	return unix.UtimesNanoAt(int(d.Fd()), path.Base(s.Path), ts, unix.AT_SYMLINK_NOFOLLOW)
}

// xattrs makes s.Path's extended attributes the primary's, by name
// (entry): on every type, without opening the file. An attribute the
// primary lacks is removed unless the backup's kernel refuses (a security
// label its own policy keeps).
func (r *Reconciler) xattrs(s *Spec) error {
	name, done, err := xattr.Entry(r.a.root, s.Path)
	if err != nil {
		return err
	}
	defer done()
	have, err := xattr.List(name)
	if err != nil && !errors.Is(err, unix.ENOTSUP) {
		return fmt.Errorf("list xattrs of %s: %w", s.Path, err)
	}
	for _, x := range have {
		if _, keep := s.Xattrs[x]; !keep {
			unix.Lremovexattr(name, x)
		}
	}
	for x, v := range s.Xattrs {
		if err := unix.Lsetxattr(name, x, v, 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("set xattr %s on %s: %w", x, s.Path, err)
		}
	}
	return nil
}

// Done removes what the primary does not have (within the scope, if
// limited), sets the directories' metadata (deepest first) and flushes
// the target.
func (r *Reconciler) Done() error {
	roots := []string{"."}
	if r.subtrees != nil {
		roots = r.roots()
	}
	for _, root := range roots {
		if err := r.removeUnseen(root); err != nil {
			return err
		}
	}
	// Deepest first, the root last: setting a child's metadata changes
	// nothing of its parent's, but making it may have changed its mtime.
	sort.SliceStable(r.dirs, func(i, j int) bool { return depth(r.dirs[i].Path) > depth(r.dirs[j].Path) })
	for i := range r.dirs {
		if err := r.meta(&r.dirs[i]); err != nil {
			return err
		}
	}
	return r.a.Sync()
}

// removeUnseen removes root, or what lies under it, that the resync did
// not list; a root the target lacks is left as it is.
func (r *Reconciler) removeUnseen(root string) error {
	if why := r.a.foreignAbove(root); why != "" {
		// A scope's root inside what is not the volume: left alone.
		r.a.log.Warn("resync leaves alone a path that is not the volume's", "path", root, "why", why)
		r.Foreign++
		return nil
	}
	var extra []string
	err := walkRoot(r.a.root, root, func(p string, d fs.DirEntry) error {
		if d.IsDir() && p != "." {
			// Never descend into what is not the volume (another file
			// system mounted inside it, the backup's own journal).
			if fi, err := r.a.root.Lstat(p); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					if why := r.a.foreign(st); why != "" {
						r.a.log.Warn("resync leaves alone a directory that is not the volume's", "path", p, "why", why)
						r.Foreign++
						return fs.SkipDir
					}
				}
			}
		}
		if !r.seen[p] {
			extra = append(extra, p)
			if d.IsDir() {
				return fs.SkipDir
			}
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) && root != "." {
		return nil
	}
	if err != nil {
		return fmt.Errorf("resync: list target: %w", err)
	}
	for _, p := range extra {
		if err := r.a.removeAll(p); err != nil {
			return err
		}
		r.Removed++
	}
	return nil
}

// depth counts a path's names; the root's is 0.
func depth(p string) int {
	if p == "." {
		return 0
	}
	return strings.Count(p, "/") + 1
}

func parentDir(p string) string {
	d := path.Dir(p)
	if d == "" {
		return "."
	}
	return d
}

func fileMode(m uint32) os.FileMode {
	return os.FileMode(m&0o777) | modeBits(m)
}
