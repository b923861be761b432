package apply

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// Marker records apply progress. The applier calls it before op index of
// batch seq runs (every op before it is complete), with the inode a
// rename's source name has at that moment (0 for other ops). A backup
// keeps the last mark where a restart can read it, so a batch interrupted
// by a crash of the process can be finished exactly with Resume. An error
// stops the batch before that op.
type Marker func(seq uint64, index int, ino uint64) error

// SetMarker installs m; it must be called before the applier is used.
func (a *Applier) SetMarker(m Marker) { a.mark = m }

func (a *Applier) markOp(seq uint64, i int, op *journal.Op) error {
	if a.mark == nil {
		return nil
	}
	var ino uint64
	if op.Kind == journal.KindRename {
		ino = a.inode(op.Path)
	}
	return a.mark(seq, i, ino)
}

// inode returns the inode at p (not following a final symlink), 0 if none.
func (a *Applier) inode(p string) uint64 {
	fi, err := a.root.Lstat(p)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// Resume finishes batch b after the process applying it died with the
// mark (index, ino): ops before index are complete, op index ran partly
// or not at all, and nothing after it ran. That holds after a crash of
// the process, not of the machine: every effect of a completed system call
// is still in the page cache (callers check the boot). Given that, the
// uncertain op can be told done or not from the target:
//   - a create, mknod, mkdir or symlink whose name exists was this op's
//     (the name did not exist before it): the entry is removed and the op
//     run again whole, since its owner or mode may not have been set yet;
//   - a link whose name exists, an unlink or rmdir whose name is gone, is
//     done;
//   - a rename is done when its source no longer has the inode it had
//     before the op (also for RENAME_EXCHANGE, where both names exist);
//   - a removexattr whose attribute is gone is done; a setxattr runs
//     again without XATTR_CREATE or XATTR_REPLACE, whose condition held
//     when it first ran and may not any more;
//   - data and metadata ops are idempotent and run again (fallocate
//     modes that shift data are refused at capture and by the decoder).
//
// The ops after it then run as in Apply. Unlike Redo, this is exact for
// any batch, also one that reuses names.
func (a *Applier) Resume(b *journal.Batch, index int, ino uint64) error {
	if index < 0 || index > len(b.Ops) {
		return fmt.Errorf("resume batch %d at op %d of %d: %w", b.Seq, index, len(b.Ops), ErrInvalidOp)
	}
	if index < len(b.Ops) {
		if err := a.finishOp(b.Seq, index, &b.Ops[index], ino); err != nil {
			return err
		}
	}
	return a.applyFrom(b, index+1, false)
}

// finishOp completes the one op a crash may have interrupted.
func (a *Applier) finishOp(seq uint64, i int, op *journal.Op, ino uint64) error {
	fail := func(err error) error {
		a.log.Error("resume op failed", "seq", seq, "index", i, "op", op.String(), "err", err)
		return opError(seq, i, op, err)
	}
	if op.Kind == journal.KindRename && a.inode(op.Path) != ino {
		return nil // the source moved: the rename happened
	}
	s := session{a: a}
	op = redoable(op)
	err := s.apply(op)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENODATA) && op.Kind == journal.KindRemovexattr:
		return nil
	case errors.Is(err, unix.EEXIST) && op.Kind == journal.KindLink:
		return nil
	case errors.Is(err, unix.ENOENT) && (op.Kind == journal.KindUnlink || op.Kind == journal.KindRmdir):
		return nil
	case errors.Is(err, unix.EEXIST) && (op.Kind == journal.KindCreate || op.Kind == journal.KindMknod ||
		op.Kind == journal.KindMkdir || op.Kind == journal.KindSymlink):
		d, base, derr := s.dir(op.Path)
		if derr != nil {
			return fail(derr)
		}
		flags := 0
		if op.Kind == journal.KindMkdir {
			flags = unix.AT_REMOVEDIR
		}
		s.a.files.removing(op.Path)
		if err := unix.Unlinkat(fd(d), base, flags); err != nil {
			return fail(err)
		}
		if err := s.apply(op); err != nil {
			return fail(err)
		}
		return nil
	}
	return fail(err)
}

// redoable returns op as it may safely run a second time: a setxattr
// without its XATTR_CREATE or XATTR_REPLACE condition.
func redoable(op *journal.Op) *journal.Op {
	if op.Kind != journal.KindSetxattr || op.Flags == 0 {
		return op
	}
	c := *op
	c.Flags = 0
	return &c
}
