// Package pathcheck tells whether a journal directory lies inside a
// volume, however it is reached: through symlinks, through a bind mount of
// the volume, or through a bind mount of a directory inside it. A journal
// inside its own volume would be captured by the mount, or removed by the
// first resync of a backup.
package pathcheck

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/mountinfo"
)

// ErrInside refuses a journal directory at or under the volume.
var ErrInside = errors.New("journal directory is inside the volume")

// Outside returns nil if dir (which need not exist yet) is not volume and
// not inside it, and an error wrapping ErrInside if it is.
func Outside(dir, volume string) error {
	var vst unix.Stat_t
	if err := unix.Stat(volume, &vst); err != nil {
		return fmt.Errorf("volume %s: %w", volume, err)
	}
	inside := fmt.Errorf("journal %s, volume %s: %w", dir, volume, ErrInside)
	p, err := Resolve(dir)
	if err != nil {
		return err
	}
	// An ancestor of the journal is the volume itself: a plain
	// subdirectory, or one reached through a bind mount of the volume.
	for q := p; ; q = filepath.Dir(q) {
		var st unix.Stat_t
		if unix.Stat(q, &st) == nil && st.Dev == vst.Dev && st.Ino == vst.Ino {
			return inside
		}
		if q == "/" {
			break
		}
	}
	// The journal's mount shows a directory of the volume's file system
	// under the volume (a bind mount of a directory inside the volume).
	v, err := Resolve(volume)
	if err != nil {
		return err
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil // no mount table to consult: the ancestor walk stands
	}
	jdev, jpath := mounts.FSPath(p)
	vdev, vpath := mounts.FSPath(v)
	if jdev != "" && jdev == vdev && mountinfo.Within(jpath, vpath) {
		return inside
	}
	return nil
}

// Resolve makes p absolute with every symlink of its longest existing
// prefix resolved.
func Resolve(p string) (string, error) {
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(append([]string{p}, rest...)...), nil
		}
		rest = append([]string{filepath.Base(p)}, rest...)
		p = parent
	}
}

// ServedBy returns the point of the pbfs mount dir lies on, or "" when it
// lies on none (or the mount table cannot be read). A second pbfs over a
// served volume, a backup applying into it or a replay writing into it
// would each write past the mount's capture.
func ServedBy(dir string) (string, error) {
	p, err := Resolve(dir)
	if err != nil {
		return "", err
	}
	tab, err := mountinfo.Read()
	if err != nil {
		return "", nil
	}
	if m, ok := tab.Lookup(p); ok && m.FSType == "fuse.pbfs" {
		return m.Point, nil
	}
	return "", nil
}
