package benchproc

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LoadAvg is the machine's 1, 5 and 15 minute load averages, for a
// report's header ("?" when /proc does not say).
func LoadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// Scrape reads a Prometheus text endpoint at http://addr/metrics into a
// map from each series (name{labels}) to its value; a labelled series
// is also summed into its bare name. An empty addr or a failed request
// gives an empty map.
func Scrape(addr string) map[string]float64 {
	out := map[string]float64{}
	if addr == "" {
		return out
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(data), "\n") {
		i := strings.LastIndexByte(l, ' ')
		if i <= 0 || strings.HasPrefix(l, "#") {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			continue
		}
		out[l[:i]] += v
		if name, _, labeled := strings.Cut(l[:i], "{"); labeled {
			out[name] += v
		}
	}
	return out
}

// Commit is `git describe --always --dirty` of the tree the benchmark
// runs from ("unknown" outside a checkout).
func Commit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// CheckWorkdir refuses a work directory a benchmark cannot trust: one on
// a tmpfs or ramfs (the plain baseline must be on a real disk), or one
// inside the current directory (the repository). It returns the file
// system's name.
func CheckWorkdir(dir string) (string, error) {
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
