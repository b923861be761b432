package benchproc

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const clockTicks = 100

// CPU is CPU time, split by where it was spent.
type CPU struct{ User, Sys time.Duration }

// Total is user plus system time.
func (c CPU) Total() time.Duration { return c.User + c.Sys }

// Minus is the CPU spent between o and c.
func (c CPU) Minus(o CPU) CPU { return CPU{c.User - o.User, c.Sys - o.Sys} }

// Plus adds two CPU times.
func (c CPU) Plus(o CPU) CPU { return CPU{c.User + o.User, c.Sys + o.Sys} }

// GroupCPU is the CPU time used so far by every live process of the
// process group pgid: a Proc's own group holds it and the helpers it
// started (the mount's flush helper), all threads included.
func GroupCPU(pgid int) CPU {
	var c CPU
	eachInGroup(pgid, func(_ string, p CPU) { c = c.Plus(p) })
	return c
}

// GroupCPUByName is GroupCPU split by process name (the comm of
// /proc/PID/stat): a mount's plugins apart from the mount and its flush
// helper, which share the name of the pbfs binary.
func GroupCPUByName(pgid int) map[string]CPU {
	out := map[string]CPU{}
	eachInGroup(pgid, func(name string, p CPU) { out[name] = out[name].Plus(p) })
	return out
}

// eachInGroup calls fn with the name and CPU time of every live process
// of group pgid.
func eachInGroup(pgid int, fn func(name string, c CPU)) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name may hold spaces; fields count from after its ')'.
		s := string(data)
		end := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g != pgid && pid != pgid {
			continue
		}
		name := s[strings.IndexByte(s, '(')+1 : end]
		u, _ := strconv.ParseInt(f[11], 10, 64)
		k, _ := strconv.ParseInt(f[12], 10, 64)
		fn(name, CPU{User: time.Duration(u) * time.Second / clockTicks, Sys: time.Duration(k) * time.Second / clockTicks})
	}
}

// CPU is the CPU time the process and its group used so far.
func (p *Proc) CPU() CPU {
	if p == nil || p.Cmd.Process == nil {
		return CPU{}
	}
	return GroupCPU(p.Cmd.Process.Pid)
}

// SelfCPU is the CPU time this process (the load generator) used so far.
func SelfCPU() CPU {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return CPU{}
	}
	return CPU{User: time.Duration(ru.Utime.Nano()), Sys: time.Duration(ru.Stime.Nano())}
}

// MaxClientCPU is the share of the machine's vCPUs above which a load
// generator may itself be what limits the throughput it measures: a
// report flags (and fails) a run whose client used more.
const MaxClientCPU = 0.75
