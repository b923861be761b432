// Package pathcheck tells whether a journal directory lies inside a
// volume, however it is reached: through symlinks, through a bind mount of
// the volume, or through a bind mount of a directory inside it. A journal
// inside its own volume would be captured by the mount, or removed by the
// first resync of a backup.
package pathcheck

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrInside refuses a journal directory at or under the volume.
var ErrInside = errors.New("journal directory is inside the volume")

// Outside returns nil if dir (which need not exist yet) is not volume and
// not inside it, and an error wrapping ErrInside if it is.
func Outside(dir, volume string) error {
	var vst unix.Stat_t
	if err := unix.Stat(volume, &vst); err != nil {
		return fmt.Errorf("stat volume: %w", err)
	}
	inside := fmt.Errorf("journal %s, volume %s: %w", dir, volume, ErrInside)
	p, err := resolve(dir)
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
	v, err := resolve(volume)
	if err != nil {
		return err
	}
	mounts, err := readMounts()
	if err != nil {
		return nil // no mount table to consult: the ancestor walk stands
	}
	jdev, jpath := mounts.fsPath(p)
	vdev, vpath := mounts.fsPath(v)
	if jdev != "" && jdev == vdev && within(jpath, vpath) {
		return inside
	}
	return nil
}

// resolve makes p absolute with every symlink of its longest existing
// prefix resolved.
func resolve(p string) (string, error) {
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

// within reports whether path p is dir or below it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

type mount struct {
	dev, root, point string
}

type mountTable []mount

// readMounts parses /proc/self/mountinfo.
func readMounts() (mountTable, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out mountTable
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		out = append(out, mount{dev: fields[2], root: unescape(fields[3]), point: unescape(fields[4])})
	}
	return out, sc.Err()
}

// fsPath returns the device p is on and p's path inside that file system:
// the topmost mount whose mount point holds p, its root, and the rest.
func (t mountTable) fsPath(p string) (dev, path string) {
	best := -1
	for i, m := range t {
		if within(p, m.point) && (best < 0 || len(m.point) >= len(t[best].point)) {
			best = i
		}
	}
	if best < 0 {
		return "", ""
	}
	m := t[best]
	rel := strings.TrimPrefix(p, m.point)
	return m.dev, filepath.Join(m.root, rel)
}

// unescape undoes mountinfo's octal escapes (\040 for a space, ...).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
