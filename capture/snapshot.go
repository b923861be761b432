package capture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/xattr"
	"github.com/pbfs/pbfs/journal"
)

// Entry is one file of the volume as a snapshot sees it. The first a
// snapshot lists is the root, path ".".
type Entry struct {
	Path   string
	Stat   unix.Stat_t
	Target string            // symlink target
	Xattrs map[string][]byte // every extended attribute
	Handle *unix.FileHandle  // regular files: reopens the file after renames
	LinkTo string            // an earlier Entry's path with the same inode
}

// Snapshot pauses every mutation, seals what is open into the journal, and
// walks the whole backing tree, so the entries are the volume exactly as of
// the returned journal header. It returns how long mutations waited.
func (c *Committer) Snapshot(ctx context.Context) (journal.Header, []Entry, time.Duration, error) {
	var hdr journal.Header
	var entries []Entry
	pause, err := c.Frozen(ctx, func(h journal.Header) (err error) {
		hdr = h
		entries, err = c.fs.walk()
		return err
	})
	if err != nil {
		return journal.Header{}, nil, pause, fmt.Errorf("snapshot: %w", err)
	}
	return hdr, entries, pause, nil
}

// Frozen pauses every mutation, seals what is open into the journal and
// runs fn with the journal's newest header: while fn runs, the backing
// directory is the volume exactly as of that batch, and no later batch
// exists. It returns how long mutations waited. One commit at a time, as
// for barriers.
func (c *Committer) Frozen(ctx context.Context, fn func(journal.Header) error) (time.Duration, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-c.sem }()
	if c.held != nil {
		return 0, errors.New("the journal is refusing appends")
	}
	f := c.fs
	f.sealMu.Lock()
	defer f.sealMu.Unlock()
	start := time.Now()
	s := f.finishSeal(f.swapLocked())
	var err error
	// Always as of some batch: an empty journal gets an empty one, so a
	// resynced backup is never mistaken for a new one.
	if len(s.Ops) > 0 {
		_, _, _, err = c.appendSealed(&s, start)
	} else if c.store.Last().Seq == 0 {
		_, _, err = c.store.Append(nil, start, 0, false)
	}
	if err == nil || len(s.Ops) == 0 {
		s.Release()
	} else {
		// Keep the sealed ops for the committer to retry, as it does with
		// its own refused batches; dropping them would lose them from the
		// journal and from every streaming backup.
		c.held, c.at = &s, start
		c.hold()
	}
	if err == nil {
		err = fn(c.store.Last())
	}
	return time.Since(start), err
}

// walk lists the backing tree, parents before children.
func (f *FS) walk() ([]Entry, error) {
	var out []Entry
	inodes := map[uint64]string{}
	var visit func(dir string) error
	visit = func(dir string) error {
		fd, err := unix.Openat(f.root, dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		ents, err := readDirents(fd, false)
		unix.Close(fd)
		if err != nil {
			return err
		}
		for _, d := range ents {
			p := childPath(dir, d.Name)
			if f.opts.Classify != nil && f.Local(p) {
				continue // never shipped; nor is anything below it
			}
			e := Entry{Path: p}
			if err := unix.Fstatat(f.root, p, &e.Stat, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
			typ := e.Stat.Mode & unix.S_IFMT
			if typ != unix.S_IFDIR && e.Stat.Nlink > 1 {
				// Any non-directory can have several names, symlinks too.
				if first, ok := inodes[e.Stat.Ino]; ok {
					e.LinkTo = first
				} else {
					inodes[e.Stat.Ino] = p
				}
			}
			switch {
			case e.LinkTo != "":
			case typ == unix.S_IFLNK:
				buf := make([]byte, 4096)
				n, err := unix.Readlinkat(f.root, p, buf)
				if err != nil {
					return err
				}
				e.Target = string(buf[:n])
			case typ == unix.S_IFREG:
				h, _, err := unix.NameToHandleAt(f.root, p, 0)
				if err != nil {
					return fmt.Errorf("file handle of %s: %w", p, err)
				}
				e.Handle = &h
			}
			if e.LinkTo == "" {
				// Symlinks too: trusted.* and security.* may be set on them.
				if e.Xattrs, err = f.xattrsOf(p); err != nil {
					return err
				}
			}
			out = append(out, e)
			if e.Stat.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := visit(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	// The root first: its mode, owner, xattrs and mtime are the volume's
	// too (a resync left the backup's own before).
	root := Entry{Path: "."}
	if err := unix.Fstat(f.root, &root.Stat); err != nil {
		return nil, err
	}
	var err error
	if root.Xattrs, err = f.xattrsOf("."); err != nil {
		return nil, err
	}
	out = append(out, root)
	if err := visit("."); err != nil {
		return nil, err
	}
	return out, nil
}

// xattrsOf reads every extended attribute of p. A file system without
// them has none; any other failure fails the snapshot, which would
// otherwise leave the backup without them and say nothing.
func (f *FS) xattrsOf(p string) (map[string][]byte, error) {
	var out map[string][]byte
	err := f.entryName(p, func(entry string) (err error) {
		out, err = xattr.All(entry)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("xattrs of %s: %w", p, err)
	}
	return out, nil
}

// OpenHandle opens a file a snapshot listed, wherever it is now; it fails
// if the file has since been deleted.
func (f *FS) OpenHandle(h *unix.FileHandle) (*os.File, error) {
	fd, err := unix.OpenByHandleAt(f.root, *h, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "snapshot"), nil
}
