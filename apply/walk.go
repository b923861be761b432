package apply

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"sort"
)

// walkRoot calls fn for p and everything below it in root, parents first,
// names sorted, as fs.WalkDir does; fn may return fs.SkipDir. It exists
// because io/fs refuses names that are not UTF-8 (fs.ValidPath), and
// Linux names may hold any byte but '/' and NUL: a resync listing a
// volume with a Latin-1 name failed with "invalid argument" for good.
func walkRoot(root *os.Root, p string, fn func(q string, d fs.DirEntry) error) error {
	fi, err := root.Lstat(p)
	if err != nil {
		return err
	}
	err = visit(root, p, fs.FileInfoToDirEntry(fi), fn)
	if errors.Is(err, fs.SkipDir) {
		return nil
	}
	return err
}

func visit(root *os.Root, p string, d fs.DirEntry, fn func(string, fs.DirEntry) error) error {
	if err := fn(p, d); err != nil || !d.IsDir() {
		return err
	}
	dir, err := root.Open(p)
	if err != nil {
		return err
	}
	ents, err := dir.ReadDir(-1)
	dir.Close()
	if err != nil {
		return err
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		err := visit(root, path.Join(p, e.Name()), e, fn)
		if errors.Is(err, fs.SkipDir) {
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}
