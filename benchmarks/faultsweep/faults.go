package main

import (
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// The faults a round draws from. A held fault (a node or etcd down or
// frozen) lasts a drawn time and is then undone: the killed process
// restarted, the frozen one thawed.
var kinds = []string{
	"kill-primary",   // kill -9 of the primary's node, restarted after the hold
	"kill-backup",    // kill -9 of a backup's node
	"freeze-primary", // SIGSTOP of the primary's node, past its lease or not, then SIGCONT
	"freeze-backup",  // SIGSTOP of a backup's node
	"restart-node",   // SIGTERM of a node (a primary steps down), started again at once
	"etcd-kill",      // kill -9 of an etcd member (all of etcd with one member), restarted
	"etcd-freeze",    // SIGSTOP of etcd's leader past the lease TTL, then SIGCONT
}

// lease is pbfs node's default lease TTL (coord.DefaultTTL): freezes are
// drawn around it.
const lease = 3 * time.Second

// fault is one injected fault, as the summary lists it.
type fault struct {
	kind   string
	target string        // a node's or an etcd member's name
	at     time.Duration // since the sweep started
	held   time.Duration
	undo   func()
}

func (f *fault) String() string {
	return fmt.Sprintf("%7.1fs %-14s %-6s held %v", f.at.Seconds(), f.kind, f.target, f.held.Round(10*time.Millisecond))
}

// injector draws faults from a seeded source and applies them.
type injector struct {
	c     *cluster
	rng   *mrand.Rand
	start time.Time
	short bool
	done  []*fault
}

// round injects one fault, or with a chance of one in four two at once
// (the second on another target), holds them, and undoes them in the
// reverse order.
func (in *injector) round() []*fault {
	n := 1
	if in.rng.IntN(4) == 0 {
		n = 2
	}
	var fs []*fault
	for i := 0; i < n; i++ {
		f := in.inject(kinds[in.rng.IntN(len(kinds))], fs)
		if f != nil {
			fs = append(fs, f)
			if i+1 < n {
				time.Sleep(time.Duration(in.rng.IntN(1000)) * time.Millisecond)
			}
		}
	}
	var hold time.Duration
	for _, f := range fs {
		hold = max(hold, f.held)
	}
	time.Sleep(hold)
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i].undo()
	}
	in.done = append(in.done, fs...)
	return fs
}

// inject applies a fault of kind to a target the faults already held do
// not touch; nil if there is none.
func (in *injector) inject(kind string, held []*fault) *fault {
	f := &fault{kind: kind, at: time.Since(in.start)}
	taken := func(name string) bool {
		for _, h := range held {
			if h.target == name {
				return true
			}
		}
		return false
	}
	if strings.HasPrefix(kind, "etcd-") {
		return in.etcdFault(f, taken)
	}
	nd := in.pick(strings.HasSuffix(kind, "-primary"), taken)
	if nd == nil {
		return nil
	}
	f.target = nd.name
	switch kind {
	case "kill-primary", "kill-backup":
		in.c.kill(nd)
		f.held = in.draw(0, 2*time.Second)
		f.undo = func() { in.c.start(nd) }
	case "freeze-primary", "freeze-backup":
		in.c.freeze(nd)
		f.held = in.draw(lease-time.Second, lease+3*time.Second)
		f.undo = func() { in.c.thaw(nd) }
	case "restart-node":
		in.c.stop(nd)
		f.undo = func() { in.c.start(nd) }
	}
	return f
}

// etcdFault kills or freezes an etcd member (the leader, for a freeze).
func (in *injector) etcdFault(f *fault, taken func(string) bool) *fault {
	members := in.c.etcdMembers
	i := in.rng.IntN(members)
	if f.kind == "etcd-freeze" && members > 1 {
		i = in.c.etcd.Leader(in.c.cli)
	}
	f.target = fmt.Sprintf("etcd%d", i)
	if taken(f.target) {
		return nil
	}
	switch f.kind {
	case "etcd-kill":
		in.c.etcd.Kill(i)
		f.held = in.draw(500*time.Millisecond, 4*time.Second)
		f.undo = func() { in.c.etcd.Restart(i) }
	case "etcd-freeze":
		p := in.c.etcd.Process(i)
		fstest.Freeze(in.c.t, p)
		f.held = in.draw(lease+500*time.Millisecond, lease+3*time.Second)
		f.undo = func() { fstest.Thaw(p) }
	}
	return f
}

// pick returns the primary (primary) or another running node, never one
// a held fault took; with no primary serving, any running node.
func (in *injector) pick(primary bool, taken func(string) bool) *node {
	ps := in.c.primaries()
	var cands []*node
	for _, nd := range in.c.nodes {
		if !nd.running() || nd.frozen || taken(nd.name) {
			continue
		}
		isPrimary := len(ps) > 0 && ps[0] == nd
		if len(ps) == 0 || isPrimary == primary {
			cands = append(cands, nd)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[in.rng.IntN(len(cands))]
}

// draw is a uniformly drawn duration in [lo, hi), shorter in short mode.
func (in *injector) draw(lo, hi time.Duration) time.Duration {
	d := lo + time.Duration(in.rng.Int64N(int64(hi-lo)+1))
	if in.short && d > lease+time.Second {
		d = lease + time.Second
	}
	return d
}
