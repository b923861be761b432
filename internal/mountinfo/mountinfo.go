// Package mountinfo reads the kernel's table of mounts
// (/proc/self/mountinfo) and answers which mount a path lies on, and where
// inside its file system; Watch waits for the table to change.
package mountinfo

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Mount is one line of the table.
type Mount struct {
	Dev    string // "major:minor" of the file system
	Root   string // the directory of the file system mounted here
	Point  string // where it is mounted
	FSType string // e.g. "ext4", "fuse.pbfs"
	Source string // what was mounted: a device, or a pbfs mount's backing directory
}

// Table is the mount table, in the kernel's order (later mounts last).
type Table []Mount

// Read reads this process's mount table.
func Read() (Table, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	var out Table
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		m := Mount{Dev: fields[2], Root: unescape(fields[3]), Point: unescape(fields[4])}
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) {
				m.FSType = fields[i+1]
				if i+2 < len(fields) {
					m.Source = unescape(fields[i+2])
				}
				break
			}
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return out, nil
}

// Within reports whether path p is dir or below it (both clean and
// absolute).
func Within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// Lookup returns the mount p (clean, absolute, symlinks resolved) lies
// on: the topmost of those whose mount point holds it.
func (t Table) Lookup(p string) (Mount, bool) {
	best := -1
	for i, m := range t {
		if Within(p, m.Point) && (best < 0 || len(m.Point) >= len(t[best].Point)) {
			best = i
		}
	}
	if best < 0 {
		return Mount{}, false
	}
	return t[best], true
}

// At returns the topmost mount whose mount point is exactly p.
func (t Table) At(p string) (Mount, bool) {
	for i := len(t) - 1; i >= 0; i-- {
		if t[i].Point == p {
			return t[i], true
		}
	}
	return Mount{}, false
}

// WithDev reports whether some mount shows the file system dev
// ("major:minor"): it is still mounted somewhere.
func (t Table) WithDev(dev string) bool {
	for _, m := range t {
		if m.Dev == dev {
			return true
		}
	}
	return false
}

// FSPath returns the device p lies on and p's path inside that file
// system: the same for every bind mount through which it is reached.
func (t Table) FSPath(p string) (dev, path string) {
	m, ok := t.Lookup(p)
	if !ok {
		return "", ""
	}
	return m.Dev, filepath.Join(m.Root, strings.TrimPrefix(p, m.Point))
}

// unescape undoes the table's octal escapes (\040 for a space, ...).
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
