package apply

import (
	"os"
	"sync"
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

// openFiles keeps the regular files batches write, and the directories
// their ops name entries in, open from one batch to the next: a database
// writes the same few files in every batch, and opening one (openRegular:
// resolve it in the root, check it, reopen it through /proc) was a tenth
// of a backup's CPU per small batch. Any namespace op empties it, since a
// name may then stand for another file; so do a resync (Forget) and Close.
type openFiles struct {
	mu    sync.Mutex
	files map[keptKey]*os.File
}

// get returns the kept descriptor of kind for p, opening it with open
// when there is none.
func (o *openFiles) get(kind int, p string, open func() (*os.File, error)) (*os.File, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := keptKey{kind, p}
	if f := o.files[k]; f != nil {
		return f, nil
	}
	f, err := open()
	if err != nil {
		return nil, err
	}
	if o.files == nil {
		o.files = map[keptKey]*os.File{}
	}
	if len(o.files) >= maxOpenFiles {
		for q, g := range o.files {
			g.Close()
			delete(o.files, q)
			break
		}
	}
	o.files[k] = f
	return f, nil
}

// drop closes every kept file.
func (o *openFiles) drop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for p, f := range o.files {
		f.Close()
		delete(o.files, p)
	}
}

// Forget closes the files the applier keeps open between batches: call it
// when something other than the applier may have changed the target's
// names (a resync).
func (a *Applier) Forget() { a.files.drop() }
