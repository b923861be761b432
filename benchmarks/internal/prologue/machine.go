package prologue

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Workdir refuses a work directory a benchmark cannot trust: one on
// a tmpfs or ramfs (the plain baseline must be on a real disk), or one
// inside the current directory (the repository). It returns the file
// system's name.
func Workdir(dir string) (string, error) {
	if wd, _ := os.Getwd(); wd != "" {
		if abs, _ := filepath.Abs(dir); strings.HasPrefix(abs+"/", wd+"/") {
			return "", fmt.Errorf("-workdir %s is inside the current directory: use a scratch directory such as /var/tmp", dir)
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "", fmt.Errorf("statfs %s: %w", dir, err)
	}
	name := FSName(st.Type)
	if name == "tmpfs" || name == "ramfs" {
		return name, fmt.Errorf("-workdir %s is a %s: state must be on a real disk", dir, name)
	}
	return name, nil
}

// FSName names a statfs file system type.
func FSName(t int64) string {
	switch t {
	case 0x01021994:
		return "tmpfs"
	case 0x858458f6:
		return "ramfs"
	case 0xEF53:
		return "ext2/3/4"
	case 0x58465342:
		return "xfs"
	case 0x9123683E:
		return "btrfs"
	case 0x65735546:
		return "fuse"
	case 0x794c7630:
		return "overlayfs"
	}
	return fmt.Sprintf("0x%x", t)
}

// Kernel is the running kernel's release, for a report's header.
func Kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// PbfsMounts counts the pbfs mounts on the machine, the run's own and
// anybody else's, for a report's header.
func PbfsMounts() int {
	data, _ := os.ReadFile("/proc/mounts")
	return strings.Count(string(data), " fuse.pbfs ")
}
