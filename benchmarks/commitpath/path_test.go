package main

import (
	"strings"
	"testing"
)

// A commit as perf script prints it: the writer's FUSE request wakes the
// mount's reader, which hands the barrier to another thread; that thread
// ships to the backup, whose synced append sleeps until the disk's
// completion (a kernel worker) wakes it; its ack wakes the mount, whose
// answer wakes the writer.
const sample = `
             fsw   100/101   [000] 1.000000: raw_syscalls:sys_enter: NR 75 (5, 0, 0, 0, 0, 0)
             fsw   100/101   [000] 1.000010: sched:sched_waking: comm=pbfs pid=201 prio=120 target_cpu=000
             fsw   100/101   [000] 1.000011: sched:sched_switch: prev_comm=fsw prev_pid=101 prev_prio=120 prev_state=S ==> next_comm=pbfs next_pid=201 next_prio=120
            pbfs   200/201   [000] 1.000020: raw_syscalls:sys_enter: NR 202 (0, 0, 0, 0, 0, 0)
            pbfs   200/201   [000] 1.000030: sched:sched_waking: comm=pbfs pid=202 prio=120 target_cpu=001
            pbfs   200/202   [001] 1.000040: raw_syscalls:sys_enter: NR 296 (0, 0, 0, 0, 0, 0)
            pbfs   200/202   [001] 1.000045: raw_syscalls:sys_enter: NR 1 (0, 0, 0, 0, 0, 0)
            pbfs   200/202   [001] 1.000050: sched:sched_waking: comm=pbfs pid=301 prio=120 target_cpu=000
     migration/0    18/18    [000] 1.000052: sched:sched_switch: prev_comm=migration/0 prev_pid=18 prev_prio=0 prev_state=S ==> next_comm=pbfs next_pid=301 next_prio=120
            pbfs   300/301   [000] 1.000055: raw_syscalls:sys_enter: NR 0 (0, 0, 0, 0, 0, 0)
            pbfs   300/301   [000] 1.000060: raw_syscalls:sys_enter: NR 75 (0, 0, 0, 0, 0, 0)
            pbfs   300/301   [000] 1.000061: sched:sched_switch: prev_comm=pbfs prev_pid=301 prev_prio=120 prev_state=D ==> next_comm=swapper/0 next_pid=0 next_prio=120
     kworker/0:2    5/5      [000] 1.000200: sched:sched_waking: comm=pbfs pid=301 prio=120 target_cpu=000
            pbfs   300/301   [000] 1.000205: raw_syscalls:sys_enter: NR 1 (0, 0, 0, 0, 0, 0)
            pbfs   300/301   [000] 1.000210: sched:sched_waking: comm=pbfs pid=203 prio=120 target_cpu=000
            pbfs   200/203   [000] 1.000215: raw_syscalls:sys_enter: NR 1 (0, 0, 0, 0, 0, 0)
            pbfs   200/203   [000] 1.000220: sched:sched_waking: comm=fsw pid=101 prio=120 target_cpu=000
             fsw   100/101   [000] 1.000230: raw_syscalls:sys_exit: NR 75 = 0
`

func TestWalkFollowsTheWakeups(t *testing.T) {
	evs, err := parseTrace(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	role := map[int]string{100: "writer", 200: "mount", 300: "backup 1"}
	tr := newTracer(evs, func(pid int) string { return role[pid] })
	commits := tr.commits(101)
	if len(commits) != 1 {
		t.Fatalf("commits: %d, want 1", len(commits))
	}
	c := commits[0]
	tr.walk(&c, 101)
	var got []string
	for _, s := range c.steps {
		d := ""
		if s.device {
			d = " (kernel)"
		}
		got = append(got, s.role+d+": "+strings.Join(s.calls, " "))
	}
	want := []string{
		"writer: fdatasync",
		"mount: futex",
		"mount: pwritev write",
		"backup 1: read fdatasync",
		"backup 1 (kernel): write",
		"mount: write",
		"writer: ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("path:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c.wakeups() != 6 {
		t.Errorf("wake-ups: %d, want 6", c.wakeups())
	}
}
