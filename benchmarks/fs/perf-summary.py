#!/usr/bin/env python3
"""Summarize a perf.data recorded by benchmarks/fs/run.sh (BENCH_PERF_DIR).

Two kinds of recording are understood, told apart by their events:

  cpu   perf record -a -g -e cpu-clock: where the pbfs process spends CPU,
        by stage (FUSE transport, backing syscalls, capture, journal, GC,
        Go scheduler), plus the top functions, self and inclusive.
  fuse  perf record -a -e fuse:fuse_request_send -e fuse:fuse_request_end:
        every FUSE request the kernel sent, by opcode, with its round trip
        (kernel send -> reply), i.e. how many trips an operation costs and
        which ones take the time.

usage: perf-summary.py PERF.DATA [--comm pbfs] [--top 25]
"""
import argparse
import collections
import re
import subprocess
import sys

HEADER = re.compile(r"^\s*(\S.*?)\s+(\d+)\s+(?:\[(\d+)\]\s+)?([\d.]+):\s+(?:(\d+)\s+)?(\S+):(?:\s+(.*))?$")
FRAME = re.compile(r"^\s*[0-9a-f]+\s+(.+?)\s+\((.*)\)\s*$")

# Stage of a CPU sample: the first rule any frame of its stack matches
# (leaf to root), in this priority order.
STAGES = [
    ("Go GC (mark, assist, sweep, scavenge)", ("runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.gcDrain",
                                              "runtime.bgsweep", "runtime.bgscavenge", "runtime.markroot")),
    ("journal: zstd", ("klauspost/compress",)),
    ("journal: Badger (append, compaction, fsync)", ("dgraph-io/badger", "dgraph-io/ristretto")),
    ("journal: seal, coalesce, encode", ("pbfs/pbfs/journal.", "pbfs/pbfs/capture.(*Committer)", "pbfs/pbfs/capture.(*FS).Seal")),
    ("backing fsync/fdatasync", ("pbfs/pbfs/capture.(*FS).Fsync",)),
    ("backing pwrite", ("golang.org/x/sys/unix.Pwrite", "golang.org/x/sys/unix.pwrite", "capture.pwriteFull")),
    ("capture: record the write (data log)", ("pbfs/pbfs/capture.(*FS).Write", "pbfs/pbfs/capture.(*dataLog)")),
    ("backing create/open/release", ("pbfs/pbfs/capture.(*FS).Create", "pbfs/pbfs/capture.(*FS).open",
                                     "pbfs/pbfs/capture.(*FS).Open", "pbfs/pbfs/capture.(*FS).Release")),
    ("backing unlink/rmdir", ("pbfs/pbfs/capture.(*FS).Remove",)),
    ("lookup/getattr/forget", ("pbfs/pbfs/capture.(*FS).Lookup", "pbfs/pbfs/capture.(*FS).Getattr",
                               "pbfs/pbfs/capture.(*FS).stat", "pbfs/pbfs/capture.(*FS).Forget")),
    ("xattr", ("xattr",)),
    ("other capture.FS calls", ("pbfs/pbfs/capture.",)),
    ("FUSE: read request from /dev/fuse", ("fuse.(*Conn).ReadRequest",)),
    ("FUSE: write reply to /dev/fuse", ("fuse.(*Conn).respond", "fuse.(*Conn).sendMessage", "Respond")),
    ("FUSE: decode/dispatch (bazil + pbfs/fs)", ("bazil.org/fuse", "pbfs/pbfs/fs.")),
    ("Go scheduler, timers, idle threads", ("runtime.schedule", "runtime.findRunnable", "runtime.mcall",
                                           "runtime.park_m", "runtime.sysmon", "runtime.mstart", "runtime.futex",
                                           "runtime.notesleep", "runtime.usleep", "runtime.goexit")),
]


def perf_script(path):
    p = subprocess.run(["perf", "script", "-i", path], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"perf script -i {path} failed:\n{p.stderr}")
    return p.stdout


def samples(text):
    """Yield (comm, tid, time, event, rest, frames) per sample."""
    cur = None
    for line in text.splitlines():
        if not line.strip():
            if cur:
                yield cur
            cur = None
            continue
        m = HEADER.match(line)
        if m and not line.startswith("\t"):
            if cur:
                yield cur
            comm, tid, _cpu, t, _period, event, rest = m.groups()
            cur = (comm.strip(), int(tid), float(t), event, rest or "", [])
            continue
        f = FRAME.match(line)
        if f and cur:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", f.group(1))
            cur[5].append((sym, f.group(2)))
    if cur:
        yield cur


def pct(a, b):
    return f"{100.0 * a / b:5.1f}%" if b else "  n/a"


def cpu_summary(text, comm, top):
    by_comm = collections.Counter()
    total = 0
    ours = []
    for s in samples(text):
        total += 1
        by_comm[s[0]] += 1
        if s[0] == comm:
            ours.append(s[5])
    n = len(ours)
    print(f"samples: {total} on all CPUs; {n} ({pct(n, total)}) in {comm}")
    print("busiest commands: " + ", ".join(f"{c} {pct(k, total).strip()}" for c, k in by_comm.most_common(6)))
    if not n:
        return
    kern = sum(1 for fr in ours if fr and fr[0][1] == "[kernel.kallsyms]")
    print(f"{comm}: {pct(kern, n).strip()} of its samples in the kernel, {pct(n - kern, n).strip()} in user space\n")

    stages = collections.Counter()
    for fr in ours:
        syms = [s for s, _ in fr]
        stage = "other"
        for name, keys in STAGES:
            if any(k in s for s in syms for k in keys):
                stage = name
                break
        stages[stage] += 1
    print(f"{comm} CPU by stage (share of the process's samples):")
    for name, k in stages.most_common():
        print(f"  {pct(k, n)}  {name}")

    self_ = collections.Counter(fr[0][0] if fr else "?" for fr in ours)
    print(f"\n{comm} top functions, self:")
    for s, k in self_.most_common(top):
        print(f"  {pct(k, n)}  {s}")

    incl = collections.Counter()
    for fr in ours:
        for s in set(sym for sym, _ in fr):
            incl[s] += 1
    skip = ("runtime.goexit", "runtime.mstart", "entry_SYSCALL", "do_syscall_64", "runtime.main", "main.main")
    print(f"\n{comm} top functions, inclusive (pbfs, bazil, badger and syscalls):")
    shown = 0
    for s, k in incl.most_common():
        if any(s.startswith(x) for x in skip):
            continue
        if not (s.startswith(("github.com/", "bazil.org/", "golang.org/x/sys/unix.", "__x64_sys_", "ext4_", "fuse_"))
                or "pbfs" in s):
            continue
        print(f"  {pct(k, n)}  {s}")
        shown += 1
        if shown >= top:
            break


def fuse_summary(text):
    send = {}
    ops = collections.defaultdict(list)
    conns = collections.Counter()
    errors = collections.Counter()
    t0 = t1 = None
    for comm, tid, t, event, rest, _ in samples(text):
        t0 = t if t0 is None else t0
        t1 = t
        if event.endswith("fuse_request_send"):
            m = re.search(r"connection (\d+) req (\d+) opcode \d+ \((\w+)\)", rest)
            if m:
                send[(m.group(1), m.group(2))] = (t, m.group(3))
                conns[m.group(1)] += 1
        elif event.endswith("fuse_request_end"):
            m = re.search(r"connection (\d+) req (\d+) len \d+ error (-?\d+)", rest)
            if m and (m.group(1), m.group(2)) in send:
                ts, op = send.pop((m.group(1), m.group(2)))
                ops[(m.group(1), op)].append(t - ts)
                if m.group(3) != "0":
                    errors[(op, int(m.group(3)))] += 1
    if not conns:
        print("no FUSE requests recorded")
        return
    span = (t1 - t0) if t1 and t0 else 0
    for conn, _ in conns.most_common(3):
        rows = [(op, v) for (c, op), v in ops.items() if c == conn]
        total_n = sum(len(v) for _, v in rows)
        total_t = sum(sum(v) for _, v in rows)
        print(f"connection {conn}: {total_n} requests in {span:.1f} s of recording "
              f"({total_n / span if span else 0:,.0f}/s), {total_t:.2f} s spent in round trips")
        print(f"  {'opcode':<18}{'count':>9}{'share':>8}{'mean us':>10}{'p50 us':>9}{'p99 us':>9}{'time share':>12}")
        for op, v in sorted(rows, key=lambda r: -sum(r[1])):
            v = sorted(v)
            mean = sum(v) / len(v)
            print(f"  {op:<18}{len(v):>9}{pct(len(v), total_n):>8}{mean * 1e6:>10.1f}{v[len(v) // 2] * 1e6:>9.1f}"
                  f"{v[min(len(v) - 1, int(len(v) * 0.99))] * 1e6:>9.1f}{pct(sum(v), total_t):>12}")
        print()
    if errors:
        print("requests answered with an error: " + ", ".join(f"{op} {e}: {k}" for (op, e), k in errors.most_common()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--comm", default="pbfs")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    text = perf_script(a.data)
    if "fuse:fuse_request_send" in text[:200000] or "fuse_request_send:" in text[:200000]:
        fuse_summary(text)
    else:
        cpu_summary(text, a.comm, a.top)


if __name__ == "__main__":
    main()
