package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/benchproc"
)

// usage is the CPU one target's processes used: the service, the mount
// with its flush helper, the proxy plugin (in the mount's process group,
// told apart by name) and all backups together.
type usage struct{ service, mount, proxy, backups benchproc.CPU }

// usage reads t's processes' CPU so far.
func (t target) usage() usage {
	u := usage{service: t.svc.CPU()}
	if t.mount != nil && t.mount.Cmd.Process != nil {
		for name, c := range benchproc.GroupCPUByName(t.mount.Cmd.Process.Pid) {
			if name == t.proxyName {
				u.proxy = u.proxy.Plus(c)
			} else {
				u.mount = u.mount.Plus(c)
			}
		}
	}
	for _, b := range t.backups {
		u.backups = u.backups.Plus(b.CPU())
	}
	return u
}

func (u usage) minus(o usage) usage {
	return usage{u.service.Minus(o.service), u.mount.Minus(o.mount), u.proxy.Minus(o.proxy), u.backups.Minus(o.backups)}
}

// perRequest formats u per 2xx answer in ms: service / mount / proxy /
// backups, a dash for a process the target does not have.
func (u usage) perRequest(t target, ok int) string {
	if ok == 0 {
		return "–"
	}
	f := func(c benchproc.CPU, has bool) string {
		if !has {
			return "–"
		}
		return fmt.Sprintf("%.2f", float64(c.Total())/float64(ok)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%s / %s / %s / %s", f(u.service, true), f(u.mount, t.mount != nil),
		f(u.proxy, t.proxyName != ""), f(u.backups, len(t.backups) > 0))
}

// commName is the name /proc gives a process started from path: its base
// name, cut to the kernel's 15 bytes.
func commName(path string) string {
	n := filepath.Base(path)
	return n[:min(len(n), 15)]
}
