// Package manifest lists a directory tree with a content hash per regular
// file: what `pbfs verify` compares between a primary and its backups.
package manifest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"
)

// Entry is one path of a tree as a comparison sees it. Times are left
// out: a directory's mtime moves with every change inside it.
type Entry struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode"` // type and permission bits
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Size int64  `json:"size"`
	// Data is what a regular file holds on disk (st_blocks), which is
	// what reading it for a digest costs: a sparse file's holes are free.
	// Only the primary's manifests on the control socket carry it.
	Data   int64  `json:"data,omitempty"`
	Digest []byte `json:"digest,omitempty"` // regular files (digest.go)
	// SHA256 is what a pbfs from before digests sent for a regular file:
	// the SHA-256 of every byte. It compares only with another SHA256.
	SHA256  []byte `json:"sha256,omitempty"`
	Target  string `json:"target,omitempty"`
	Missing bool   `json:"missing,omitempty"`
	// Xattrs digests every extended attribute, ACLs included
	// (xattrs.go); empty from a pbfs from before, and then not compared.
	Xattrs []byte `json:"xattrs,omitempty"`
}

// Walk calls fn for the root (".": its mode, owner and xattrs are the
// volume's too) and then every entry below it, parents first, names
// sorted; skip, if set, leaves a path (and everything below it) out. With paths
// given, only those are listed (a path not there comes as Missing).
// Regular files are opened with O_NOFOLLOW|O_NONBLOCK and never
// special files, so a FIFO cannot block the walk.
//
// The walk stops, with ctx's error, once ctx ends (the caller went away),
// also inside a large file.
//
// Every path is confined to root (os.Root): a path given with ".." or
// through a symlink that leads out is refused, not followed.
func Walk(ctx context.Context, rootDir string, paths []string, skip func(string) bool, fn func(Entry) error) error {
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	defer root.Close()
	if len(paths) > 0 {
		for _, p := range paths {
			e, err := stat(ctx, root, p)
			if errors.Is(err, fs.ErrNotExist) {
				e, err = Entry{Path: p, Missing: true}, nil
			}
			if err != nil {
				return err
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	}
	var visit func(dir string) error
	visit = func(dir string) error {
		name := dir
		if name == "" {
			name = "."
		}
		d, err := root.Open(name)
		if err != nil {
			return goneOrErr(dir, err)
		}
		ents, err := d.ReadDir(-1)
		d.Close()
		if err != nil {
			return goneOrErr(dir, err)
		}
		sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
		for _, d := range ents {
			p := d.Name()
			if dir != "" {
				p = dir + "/" + d.Name()
			}
			if skip != nil && skip(p) {
				continue
			}
			e, err := stat(ctx, root, p)
			if errors.Is(err, fs.ErrNotExist) {
				continue // gone since the listing: the service is live
			}
			if err != nil {
				return err
			}
			if err := fn(e); err != nil {
				return err
			}
			if e.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := visit(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	e, err := stat(ctx, root, ".")
	if err != nil {
		return err
	}
	if err := fn(e); err != nil {
		return err
	}
	return visit("")
}

// goneOrErr passes err on, unless it says that directory dir, listed a
// moment ago, has been removed since (the service is live): the walk then
// goes on without what was in it. The root itself must be there.
func goneOrErr(dir string, err error) error {
	if dir != "" && errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// stat describes one path, hashing a regular file's contents.
func stat(ctx context.Context, root *os.Root, p string) (Entry, error) {
	if !filepath.IsLocal(p) {
		return Entry{}, fmt.Errorf("manifest %q: %w", p, errNotLocal)
	}
	fi, err := root.Lstat(p)
	if err != nil {
		return Entry{}, fmt.Errorf("manifest %s: %w", p, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Entry{}, fmt.Errorf("manifest %s: no stat", p)
	}
	e := Entry{Path: p, Mode: st.Mode, UID: st.Uid, GID: st.Gid, Size: st.Size}
	if e.Xattrs, err = xattrDigest(root, p); err != nil {
		return Entry{}, fmt.Errorf("manifest %s: %w", p, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		size, sum, err := fileDigest(ctx, root, p)
		if err != nil {
			return Entry{}, fmt.Errorf("manifest %s: %w", p, err)
		}
		e.Size, e.Digest = size, sum // as read, should it have changed since the stat
		e.Data = st.Blocks * 512
	case unix.S_IFLNK:
		t, err := root.Readlink(p)
		if err != nil {
			return Entry{}, fmt.Errorf("manifest %s: %w", p, err)
		}
		e.Target = t
	case unix.S_IFDIR:
		e.Size = 0
	}
	return e, nil
}

// errNotLocal refuses a path that is not below the root.
var errNotLocal = errors.New("not a path inside the volume")

// Incomparable reports whether a and b are regular files whose contents
// were hashed two different ways (one side runs a pbfs from before
// digests), so that Diff cannot tell whether they are equal.
func Incomparable(a, b Entry) bool {
	return !a.Missing && !b.Missing && a.Mode&unix.S_IFMT == unix.S_IFREG && b.Mode&unix.S_IFMT == unix.S_IFREG &&
		(a.Digest == nil) != (b.Digest == nil)
}

// Diff says how b differs from a (a's view first), or "" if it does not.
func Diff(a, b Entry) string {
	switch {
	case a.Missing && b.Missing:
		return ""
	case b.Missing:
		return "missing"
	case a.Missing:
		return "not on the primary"
	case a.Mode&unix.S_IFMT != b.Mode&unix.S_IFMT:
		return fmt.Sprintf("type %o, want %o", b.Mode&unix.S_IFMT, a.Mode&unix.S_IFMT)
	case a.Mode != b.Mode:
		return fmt.Sprintf("mode %o, want %o", b.Mode&0o7777, a.Mode&0o7777)
	case a.UID != b.UID || a.GID != b.GID:
		return fmt.Sprintf("owner %d:%d, want %d:%d", b.UID, b.GID, a.UID, a.GID)
	case a.Size != b.Size:
		return fmt.Sprintf("size %d, want %d", b.Size, a.Size)
	case Incomparable(a, b):
		return "contents hashed by a pbfs from before sparse-aware digests: upgrade it to compare them"
	case string(a.Digest) != string(b.Digest) || string(a.SHA256) != string(b.SHA256):
		return "contents differ"
	case a.Target != b.Target:
		return fmt.Sprintf("symlink to %q, want %q", b.Target, a.Target)
	case len(a.Xattrs) > 0 && len(b.Xattrs) > 0 && string(a.Xattrs) != string(b.Xattrs):
		return "extended attributes (or ACLs) differ"
	}
	return ""
}
