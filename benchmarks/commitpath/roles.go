package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/pbfs/pbfs/benchmarks/internal/cluster"
)

// roles names the processes of a run: the writer (this program), the
// mount, its flush helper (a child of the mount) and each backup. Any
// other process is no role: the kernel's threads and interrupts among
// them.
type roles struct {
	known map[int]string
	mount int
}

func newRoles(self int, c *cluster.Cluster) *roles {
	r := &roles{known: map[int]string{self: "writer"}}
	if c.Mount != nil {
		r.mount = c.Mount.Cmd.Process.Pid
		r.known[r.mount] = "mount"
	}
	for i, b := range c.Backups {
		r.known[b.Cmd.Process.Pid] = fmt.Sprintf("backup %d", i+1)
	}
	return r
}

func (r *roles) of(pid int) string {
	if name, ok := r.known[pid]; ok {
		return name
	}
	name := ""
	if pid > 0 && r.mount > 0 && parentOf(pid) == r.mount {
		name = "flush helper"
	}
	r.known[pid] = name
	return name
}

// parentOf reads pid's parent from /proc (0 once the process is gone).
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
