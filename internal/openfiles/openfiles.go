// Package openfiles finds the processes that hold a directory's files
// open, or have their working directory in it, from /proc.
package openfiles

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Holder is one process and one path under the directory it holds.
type Holder struct {
	Pid  int
	Comm string
	Path string
}

func (h Holder) String() string { return fmt.Sprintf("pid %d (%s): %s", h.Pid, h.Comm, h.Path) }

// Under returns up to max holders of dir (an absolute, resolved path),
// other than this process: open descriptors and working directories at or
// below it. Processes it may not inspect are passed over.
func Under(dir string, max int) ([]Holder, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	self := os.Getpid()
	inside := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	var out []Holder
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		base := filepath.Join("/proc", e.Name())
		var paths []string
		if cwd, err := os.Readlink(filepath.Join(base, "cwd")); err == nil && inside(cwd) {
			paths = append(paths, cwd)
		}
		fds, _ := os.ReadDir(filepath.Join(base, "fd"))
		for _, fd := range fds {
			if t, err := os.Readlink(filepath.Join(base, "fd", fd.Name())); err == nil && inside(strings.TrimSuffix(t, " (deleted)")) {
				paths = append(paths, t)
			}
		}
		if len(paths) == 0 {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join(base, "comm"))
		for _, p := range paths {
			out = append(out, Holder{Pid: pid, Comm: strings.TrimSpace(string(comm)), Path: p})
			if len(out) >= max {
				return out, nil
			}
		}
	}
	return out, nil
}
