// Package apply applies journal batches to a directory, confined to it
// with os.Root (and openat2's RESOLVE_BENEATH for the directories it keeps
// open): whatever a batch says, nothing outside the target is read,
// written or followed. `pbfs journal replay` and backups share it.
package apply

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// ErrInvalidOp marks an op that is malformed in itself (a bad path, an
// unknown kind), as opposed to one the target refused.
var ErrInvalidOp = journal.ErrInvalidOp

// OpError reports the op a batch stopped at.
type OpError struct {
	Seq   uint64
	Index int
	Op    string
	Path  string // the op's path
	Bytes int    // what it writes: data, an extended attribute's value
	Err   error
}

func opError(seq uint64, i int, op *journal.Op, err error) *OpError {
	return &OpError{Seq: seq, Index: i, Op: op.String(), Path: op.Path, Bytes: len(op.Data), Err: err}
}

func (e *OpError) Error() string {
	return fmt.Sprintf("apply batch %d op %d (%s): %v", e.Seq, e.Index, e.Op, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

// Applier applies batches to one target directory.
type Applier struct {
	root    *os.Root
	rootDir *os.File // the root's directory, for openat2 (openDir)
	log     *slog.Logger
	mark    Marker
	// dev is the target's file system; protected lists directories a
	// resync must never remove (guard.go).
	dev       uint64
	protected []devIno
	files     openFiles // kept open between batches (files.go)
}

// New opens the target directory dir.
func New(dir string, log *slog.Logger) (*Applier, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open apply target: %w", err)
	}
	dev, err := rootDev(r)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("open apply target: %w", err)
	}
	rd, err := r.Open(".")
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("open apply target: %w", err)
	}
	return &Applier{root: r, rootDir: rd, log: log, dev: dev}, nil
}

// Close releases the target.
func (a *Applier) Close() error {
	a.files.drop()
	a.rootDir.Close()
	return a.root.Close()
}

// Apply applies every op of b in order and then flushes the target's
// filesystem (syncfs), so a nil return means the batch is durable. It stops
// at the first op that fails and returns an *OpError naming it; the ops
// before it stay applied.
func (a *Applier) Apply(b *journal.Batch) error { return a.apply(b, false) }

// ApplyUnsynced is Apply without the syncfs: the batch is in the page
// cache when it returns, and a later Sync makes it durable (see Window).
func (a *Applier) ApplyUnsynced(b *journal.Batch) error { return a.ops(b, 0, false) }

// RedoUnsynced is Redo without the syncfs.
func (a *Applier) RedoUnsynced(b *journal.Batch) error { return a.ops(b, 0, true) }

// Redo applies a batch that may already be partly applied (the applier
// was killed in the middle of it): a create, mkdir, symlink or link whose
// name exists, and an unlink, rmdir or rename whose name is gone, are taken
// as done. Data and metadata ops are idempotent and simply run again. Redo
// cannot tell a rename already done from one whose source name was reused
// later in the batch; callers treat a redone volume as needing verification.
func (a *Applier) Redo(b *journal.Batch) error { return a.apply(b, true) }

func (a *Applier) apply(b *journal.Batch, redo bool) error {
	return a.applyFrom(b, 0, redo)
}

func (a *Applier) applyFrom(b *journal.Batch, start int, redo bool) error {
	if err := a.ops(b, start, redo); err != nil {
		return err
	}
	return a.Sync()
}

// ops applies b's ops from start on, without a sync.
func (a *Applier) ops(b *journal.Batch, start int, redo bool) error {
	s := session{a: a}
	for i := start; i < len(b.Ops); i++ {
		op := &b.Ops[i]
		if err := a.markOp(b.Seq, i, op); err != nil {
			return opError(b.Seq, i, op, err)
		}
		if redo {
			op = redoable(op)
		}
		err := s.apply(op)
		if redo && alreadyDone(op.Kind, err) {
			continue
		}
		if capsGone(op, err) || aclGone(op, err) {
			continue
		}
		if err != nil {
			a.log.Error("apply op failed", "seq", b.Seq, "index", i, "op", op.String(), "err", err)
			return opError(b.Seq, i, op, err)
		}
	}
	return nil
}

// capsGone: the removal of a file capability the target no longer holds.
// The kernel strips security.capability itself on every write, truncate
// and chown of the file, the applier's own as a writer's on the primary,
// so when the primary records the removal (a write by a caller without
// CAP_FSETID) the target's copy has lost it already. A backup stalled on
// this for every such write before.
func capsGone(op *journal.Op, err error) bool {
	return op.Kind == journal.KindRemovexattr && op.Name == "security.capability" && errors.Is(err, unix.ENODATA)
}

// aclGone: the removal of an inheritable ACL the target's new entry never
// got. The primary records one when the entry's parent lost its default
// ACL earlier in the batch, since this target applies that removal only
// after the create, whose entry then inherited the old ACL; where the
// target's entry holds none, the removal has nothing to do.
func aclGone(op *journal.Op, err error) bool {
	return op.Kind == journal.KindRemovexattr && errors.Is(err, unix.ENODATA) &&
		(op.Name == "system.posix_acl_access" || op.Name == "system.posix_acl_default")
}

func alreadyDone(k journal.Kind, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, unix.EEXIST):
		return k == journal.KindCreate || k == journal.KindMknod || k == journal.KindMkdir || k == journal.KindSymlink || k == journal.KindLink
	case errors.Is(err, unix.ENOENT):
		return k == journal.KindUnlink || k == journal.KindRmdir || k == journal.KindRename
	case errors.Is(err, unix.ENODATA):
		return k == journal.KindRemovexattr
	}
	return false
}

// Sync flushes the target's filesystem.
func (a *Applier) Sync() error {
	f, err := a.root.Open(".")
	if err != nil {
		return fmt.Errorf("sync target: %w", err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("sync target: %w", err)
	}
	return nil
}

// session is one batch's run; the directories and files it opens stay
// open in the Applier (files.go).
type session struct {
	a *Applier
}

// dir opens the directory holding p and returns it with p's last component.
func (s *session) dir(p string) (*os.File, string, error) {
	if p == "." {
		return nil, "", fmt.Errorf("op needs a name, not the root: %w", ErrInvalidOp)
	}
	d, base := path.Split(p)
	d = path.Clean(d)
	f, err := s.a.files.get(keptDir, d, func() (*os.File, bool, error) { return s.a.openDir(d) })
	if err != nil {
		return nil, "", err
	}
	return f, base, nil
}

// open returns p opened for writing: a regular file, never a final
// symlink, FIFO or device (openRegular).
func (s *session) open(p string) (*os.File, error) {
	return s.a.files.get(keptFile, p, func() (*os.File, bool, error) {
		f, err := openRegular(s.a.root, p, os.O_WRONLY)
		return f, false, err
	})
}

func fd(f *os.File) int { return int(f.Fd()) }

// Redoable reports whether Redo reproduces b exactly however much of it
// was applied: every name its namespace ops use appears in one op only, and
// no op works inside a directory the batch renames. Otherwise a redo could
// take a later reuse of a name for the op already done (rename a b; create
// a), and the volume needs a resync instead.
func Redoable(b *journal.Batch) bool {
	seen := map[string]bool{}
	var moved []string
	use := func(p string) bool {
		if seen[p] {
			return false
		}
		seen[p] = true
		return true
	}
	for i := range b.Ops {
		op := &b.Ops[i]
		if !op.Kind.IsNamespace() {
			continue
		}
		if !use(op.Path) {
			return false
		}
		if op.Kind == journal.KindRename || op.Kind == journal.KindLink {
			if !use(op.Path2) {
				return false
			}
		}
		if op.Kind == journal.KindRename {
			moved = append(moved, op.Path+"/", op.Path2+"/")
		}
	}
	for p := range seen {
		for _, m := range moved {
			if strings.HasPrefix(p, m) {
				return false
			}
		}
	}
	return true
}
