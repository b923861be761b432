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
func KillHard(pid int) {
	dir := pluginSocketDir(pid)
	syscall.Kill(pid, syscall.SIGKILL)
	if dir != "" {
		os.RemoveAll(dir)
	}
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
