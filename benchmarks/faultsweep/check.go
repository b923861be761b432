package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/treecmp"
)

// awaitPrimary waits for exactly one node to say it is the primary and
// answer a barrier; nil if none does within timeout.
func (c *cluster) awaitPrimary(timeout time.Duration) *node {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ps := c.primaries(); len(ps) == 1 && barrier(context.Background(), ps[0]) {
			return ps[0]
		}
	}
	return nil
}

// converge waits until every other node is connected to p, in sync, and
// has applied a barrier taken now.
func (c *cluster) converge(p *node, timeout time.Duration) error {
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if !barrier(context.Background(), p) {
			last = "the primary acknowledges no barrier"
			continue
		}
		st, ok := c.status(p)
		if !ok {
			continue
		}
		done := 0
		for _, b := range st.Backups {
			if b.Up && !b.Stale && !b.Resyncing && b.AppliedSeq >= st.LastSeq {
				done++
			}
		}
		if done == len(c.nodes)-1 {
			return nil
		}
		last = fmt.Sprintf("%+v", st.Backups)
	}
	return fmt.Errorf("converge: the backups did not catch up with %s within %v: %s", p.name, timeout, last)
}

// verdict waits for one primary and for the others to converge on it,
// then lists every violation: no primary, more than one, an acknowledged
// write missing or changed on the primary, a backup whose tree differs
// from the primary's.
func (c *cluster) verdict(l *ledger) (*node, []string) {
	p := c.awaitPrimary(90 * time.Second)
	if p == nil {
		return nil, []string{"no primary serves 90 s after the last fault"}
	}
	var bad []string
	if err := c.converge(p, 120*time.Second); err != nil {
		bad = append(bad, err.Error())
	}
	ps, leader := c.primaries(), c.leaderName()
	if len(ps) != 1 || ps[0] != p || leader != p.name {
		var names []string
		for _, o := range ps {
			names = append(names, o.name)
		}
		bad = append(bad, fmt.Sprintf("primaries: %v say they are; etcd's leader key names %q", names, leader))
	}
	bad = append(bad, l.check(p.vol)...)
	for _, nd := range c.others(p) {
		cmp, err := treecmp.CompareWith(p.vol, nd.vol, treecmp.Options{Exact: true})
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s vs primary %s: %v", nd.name, p.name, err))
			continue
		}
		for i, d := range cmp.Diffs {
			if i == 20 {
				bad = append(bad, fmt.Sprintf("%s vs primary %s: and %d more differences", nd.name, p.name, len(cmp.Diffs)-20))
				break
			}
			bad = append(bad, fmt.Sprintf("%s vs primary %s: %s", nd.name, p.name, d))
		}
	}
	return p, bad
}

// logTails are the last lines of every node's log.
func (c *cluster) logTails(n int) string {
	var b strings.Builder
	for _, nd := range c.nodes {
		data, _ := os.ReadFile(nd.logPath)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "== %s (%s):\n%s\n", nd.name, nd.logPath, strings.Join(lines[max(0, len(lines)-n):], "\n"))
	}
	return b.String()
}
