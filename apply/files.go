package apply

import (
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/journal"
)

// maxOpenFiles bounds the files and directories an Applier keeps open
// between batches.
const maxOpenFiles = 16

// What a kept descriptor is: a regular file open for writing, or a
// directory that ops address names in.
const (
	keptFile = iota
	keptDir
)

type keptKey struct {
	kind int
	path string
}

// kept is one kept descriptor. plain means its path was resolved without
// a symlink (openDir), so that only a change to the name of the directory
// itself or of one of its ancestors can make the path stand for another
// directory.
type kept struct {
	f     *os.File
	plain bool
}

// openFiles keeps the regular files batches write, and the directories
// their ops name entries in, open from one batch to the next: a database
// writes the same few files in every batch, and opening one (openRegular:
// resolve it in the root, check it, reopen it through /proc) was a tenth
// of a backup's CPU per small batch. An op that removes or replaces a name
// (unlink, rmdir, rename: changed) closes every kept file, and every kept
// directory but the plain ones whose path does not pass through that name;
// creating a name changes what no kept path stands for, since it fails
// where the name exists. A resync (Forget) and Close empty it.
type openFiles struct {
	mu    sync.Mutex
	files map[keptKey]kept
}

// get returns the kept descriptor of kind for p, opening it with open
// when there is none.
func (o *openFiles) get(kind int, p string, open func() (*os.File, bool, error)) (*os.File, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := keptKey{kind, p}
	if e, ok := o.files[k]; ok {
		return e.f, nil
	}
	f, plain, err := open()
	if err != nil {
		return nil, err
	}
	if o.files == nil {
		o.files = map[keptKey]kept{}
	}
	if len(o.files) >= maxOpenFiles {
		for q, e := range o.files {
			e.f.Close()
			delete(o.files, q)
			break
		}
	}
	o.files[k] = kept{f, plain}
	return f, nil
}

// changed closes what op may make stand for another file or directory,
// before op runs. (The directories op itself opens hold the names it
// changes; they stay what they were.)
func (o *openFiles) changed(op *journal.Op) {
	switch op.Kind {
	case journal.KindUnlink, journal.KindRmdir:
		o.removing(op.Path)
	case journal.KindRename:
		o.removing(op.Path, op.Path2)
	}
	// A create or link changes no name that stands for something: it
	// fails where its name exists.
}

// removing closes what may stand for another file or directory once
// names are removed or replaced: every kept file, and every kept directory
// that is not plain or lies at or below one of names.
func (o *openFiles) removing(names ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, e := range o.files {
		if k.kind == keptDir && e.plain && !under(k.path, names) {
			continue
		}
		e.f.Close()
		delete(o.files, k)
	}
}

// under reports whether p is one of names or lies below one of them.
func under(p string, names []string) bool {
	for _, n := range names {
		if p == n || strings.HasPrefix(p, n+"/") {
			return true
		}
	}
	return false
}

// drop closes every kept file.
func (o *openFiles) drop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, e := range o.files {
		e.f.Close()
		delete(o.files, k)
	}
}

// Forget closes the files the applier keeps open between batches: call it
// when something other than the applier may have changed the target's
// names (a resync).
func (a *Applier) Forget() { a.files.drop() }

// openDir opens the directory d of the target. It resolves d beneath the
// root with openat2 and no symlink on the way, which gives a plain kept
// directory; where that fails (a symlink in d, a kernel without openat2, or
// a name that is missing or no directory) it opens d through os.Root, and
// the directory is not plain (os.Root gives the error, if any).
// The descriptor is not registered with Go's poller: a directory never
// blocks, and registering took four system calls.
func (a *Applier) openDir(d string) (*os.File, bool, error) {
	if d == "." {
		f, err := a.root.OpenFile(".", os.O_RDONLY|unix.O_DIRECTORY, 0)
		return f, true, err
	}
	fd, err := unix.Openat2(int(a.rootDir.Fd()), d, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err == nil {
		return os.NewFile(uintptr(fd), d), true, nil
	}
	f, err := a.root.OpenFile(d, os.O_RDONLY|unix.O_DIRECTORY, 0)
	return f, false, err
}
