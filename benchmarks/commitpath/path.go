package main

import (
	"sort"
	"strings"
)

// A commit's critical path, walked back from the moment the writer's
// fdatasync returns: who woke the writer, who woke that thread, and so
// on, until the chain reaches the writer entering fdatasync. Each step is
// a thread running from its wake-up to the wake-up it gave the next; the
// system calls it made meanwhile are the step's work. A thread woken by a
// thread of no pbfs process (an interrupt, a kernel worker) waited on the
// kernel or the device: the walk goes on from the moment it went to sleep.

// step is one thread's stretch on the path.
type step struct {
	tid      int
	role     string
	from, to float64  // when it was woken (or started waiting), when it woke the next
	calls    []string // system calls entered in between, in order
	device   bool     // it slept in the kernel and a non-pbfs thread woke it
}

// commit is one traced fdatasync of the writer and its path.
type commit struct {
	start, end float64
	steps      []step // in time order
}

func (c commit) latency() float64 { return c.end - c.start }

// wakeups counts the path's wake-ups: every step but the writer's first
// is one.
func (c commit) wakeups() int { return len(c.steps) - 1 }

// tracer indexes a trace by thread.
type tracer struct {
	byTid map[int][]event // each thread's own events, in time order
	woken map[int][]event // waking events by the thread woken, in time order
	roles func(pid int) string
	pidOf map[int]int
}

func newTracer(evs []event, roles func(pid int) string) *tracer {
	tr := &tracer{byTid: map[int][]event{}, woken: map[int][]event{}, roles: roles, pidOf: map[int]int{}}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].t < evs[j].t })
	for _, e := range evs {
		tr.byTid[e.tid] = append(tr.byTid[e.tid], e)
		tr.pidOf[e.tid] = e.pid
		if e.kind == waking {
			tr.woken[e.target] = append(tr.woken[e.target], e)
		}
	}
	return tr
}

// commits finds the writer's fdatasyncs that start and end in the trace.
func (tr *tracer) commits(writer int) []commit {
	var out []commit
	var start float64 = -1
	for _, e := range tr.byTid[writer] {
		switch {
		case e.kind == sysEnter && e.nr == nrFdatasync:
			start = e.t
		case e.kind == sysExit && e.nr == nrFdatasync && start >= 0:
			out = append(out, commit{start: start, end: e.t})
			start = -1
		}
	}
	return out
}

const nrFdatasync = 75

// maxSteps bounds a walk (a trace missing events could loop).
const maxSteps = 200

// walk fills c.steps, from c.end back to c.start.
func (tr *tracer) walk(c *commit, writer int) {
	tid, t := writer, c.end
	var rev []step
	for len(rev) < maxSteps {
		w, ok := tr.lastWaking(tid, t, c.start)
		if !ok {
			break // running since before the commit began: the writer's own first stretch
		}
		if !talks(tr.role(w.tid), tr.role(tid)) { // woken by the kernel
			slept := tr.lastSleep(tid, w.t, c.start)
			rev = append(rev, tr.stretch(tid, slept, t, true))
			t = slept
			continue
		}
		rev = append(rev, tr.stretch(tid, w.t, t, false))
		tid, t = w.tid, w.t
		if tid == writer {
			break
		}
	}
	rev = append(rev, tr.stretch(tid, c.start, t, false))
	for i := len(rev) - 1; i >= 0; i-- {
		c.steps = append(c.steps, rev[i])
	}
}

func (tr *tracer) role(tid int) string { return tr.roles(tr.pidOf[tid]) }

// talks reports whether a thread of role a can wake one of role b itself:
// threads of one process, the writer and the mount (FUSE), the mount and
// its flush helper or a backup (pipes, sockets). Any other waking is the
// kernel's work done in whichever thread was on the CPU: a disk's
// completion that ran in one backup while it woke the other, say.
func talks(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if a == b {
		return true
	}
	if b == "mount" {
		a, b = b, a
	}
	return a == "mount" && (b == "writer" || b == "flush helper" || strings.HasPrefix(b, "backup"))
}

// lastWaking is the newest waking of tid in (after, before].
func (tr *tracer) lastWaking(tid int, before, after float64) (event, bool) {
	ws := tr.woken[tid]
	i := sort.Search(len(ws), func(i int) bool { return ws[i].t > before }) - 1
	if i < 0 || ws[i].t <= after {
		return event{}, false
	}
	return ws[i], true
}

// lastSleep is when tid last left the CPU asleep before t (after after).
func (tr *tracer) lastSleep(tid int, t, after float64) float64 {
	evs := tr.byTid[tid]
	for i := sort.Search(len(evs), func(i int) bool { return evs[i].t >= t }) - 1; i >= 0 && evs[i].t > after; i-- {
		if evs[i].kind == switchOut && evs[i].state != "R" {
			return evs[i].t
		}
	}
	return after
}

// stretch is tid's step from from to to: the system calls it entered.
func (tr *tracer) stretch(tid int, from, to float64, device bool) step {
	s := step{tid: tid, role: tr.role(tid), from: from, to: to, device: device}
	evs := tr.byTid[tid]
	for i := sort.Search(len(evs), func(i int) bool { return evs[i].t >= from }); i < len(evs) && evs[i].t <= to; i++ {
		if evs[i].kind == sysEnter {
			s.calls = append(s.calls, syscallName(evs[i].nr))
		}
	}
	return s
}
