package fstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// KillHard kills process pid with SIGKILL, as the loss of its machine
// would. If it is a pbfs plugin, the socket directory its host made for
// it is removed too: a lost machine takes that with it, and once both the
// plugin and its host died by SIGKILL nobody else would (a test that kills
// both used to leave one in the temp directory each run).
//
// If it is a pbfs process that hosts plugins, the sockets go-plugin's
// broker listens on in the temp directory are removed too: go-plugin puts
// them there, not in the plugin's directory, and removes them only when
// the host exits cleanly.
func KillHard(pid int) {
	dir := pluginSocketDir(pid)
	socks := brokerSockets(pid)
	syscall.Kill(pid, syscall.SIGKILL)
	if dir != "" {
		os.RemoveAll(dir)
	}
	for _, s := range socks {
		os.Remove(s)
	}
}

// brokerSockets are the Unix sockets process pid listens on whose names
// go-plugin gives them ("plugin" and digits) in the temp directory.
func brokerSockets(pid int) []string {
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	table, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	var paths []string
	for _, line := range strings.Split(string(table), "\n") {
		// Num RefCount Protocol Flags Type St Inode Path
		f := strings.Fields(line)
		if len(f) == 8 && inodes[f[6]] && filepath.Dir(f[7]) == filepath.Clean(os.TempDir()) &&
			strings.HasPrefix(filepath.Base(f[7]), "plugin") {
			paths = append(paths, f[7])
		}
	}
	return paths
}

// pluginSocketDir is the socket directory a pbfs host gave plugin pid,
// from its environment ("" for any other process).
func pluginSocketDir(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return ""
	}
	for _, kv := range strings.Split(string(data), "\x00") {
		if v, ok := strings.CutPrefix(kv, "PLUGIN_UNIX_SOCKET_DIR="); ok && strings.HasPrefix(filepath.Base(v), "pbfs-plugin-") {
			return v
		}
	}
	return ""
}
