#!/usr/bin/env python3
"""Write benchmarks/fs/run.sh's markdown report to stdout.

usage: report.py RESULTS ERRORS OUTDIR BARRIERS

  RESULTS   tab-separated config, job, round, value (a number, or ERR);
            round 0 of the first job lists the configurations in the
            configured order
  ERRORS    text quoted as is under "Errors"
  OUTDIR    each run's JSON (fio's, or the small-file job's), named
            CONFIG-JOB.json, or CONFIG-JOB-rROUND.json when there is more
            than one round (run.sh's run_name)
  BARRIERS  tab-separated config, job, round, milliseconds

The machine, binary and parameters come from run.sh's BENCH_META_*
environment variables.

With one round the tables show that round's numbers. With more, every
number is the median over the rounds, and each ratio is paired: a
configuration's value over plain's (or bindfs's) in the same round, since
configurations of one round run back to back while rounds are minutes
apart. The "Absolute numbers" table keeps the layout median.py parses
(job | unit | one value per configuration).
"""
import collections
import json
import os
import statistics
import sys

LABEL = {"plain": "plain", "pbfs": "pbfs", "pbfs-noxattrs": "pbfs --no-xattrs",
         "pbfs-nocapture": "pbfs --no-capture", "pbfs-jsep": "pbfs, journal in work dir",
         "bindfs": "bindfs"}
JOBDESC = {
    "seqwrite": ("1 MiB sequential write + end fsync", "MiB/s"),
    "randwrite": ("4 KiB random write, fdatasync each", "IOPS"),
    "randread": ("4 KiB random read (buffered)", "IOPS"),
    "smallfiles": ("small files: create+write 4 KiB, unlink", "files/s"),
    "sqlite": ("SQLite WAL single-row INSERT tx", "tx/s"),
}
# bindfs ratios to plain quoted by the issue (the reference system's numbers).
REFERENCE = {"randwrite": "0.68", "smallfiles": "0.35", "sqlite": "0.57"}


def label(c):
    return LABEL.get(c, c)


def desc(j):
    return JOBDESC.get(j, (j, ""))[0]


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def fmt(v):
    x = num(v)
    if x is None:
        return v
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def spread(xs, bold=True):
    """'**median** (min-max)' of ratios."""
    m = f"{statistics.median(xs):.2f}"
    return f"{'**' + m + '**' if bold else m} ({min(xs):.2f}-{max(xs):.2f})"


class Runs:
    """The results file: one value per configuration, job and round."""

    def __init__(self, path):
        self.val, self.cfgs, self.jobs, rounds = {}, [], [], set()
        for line in open(path):
            cfg, job, rnd, val = line.rstrip("\n").split("\t")
            self.val[(cfg, job, int(rnd))] = val
            rounds.add(int(rnd))
            if cfg not in self.cfgs:
                self.cfgs.append(cfg)
            if job not in self.jobs:
                self.jobs.append(job)
        self.rounds = max(rounds) + 1 if rounds else 1

    def numbers(self, cfg, job):
        """The numeric values over the rounds (failed runs left out)."""
        xs = (num(self.val.get((cfg, job, r))) for r in range(self.rounds))
        return [x for x in xs if x is not None]

    def paired(self, cfg, ref, job):
        """cfg / ref for every round in which both have a number."""
        out = []
        for r in range(self.rounds):
            x, p = num(self.val.get((cfg, job, r))), num(self.val.get((ref, job, r)))
            if x is not None and p:
                out.append(x / p)
        return out

    def absolute(self, cfg, job):
        if self.rounds == 1:
            return fmt(self.val.get((cfg, job, 0), ""))
        xs = self.numbers(cfg, job)
        return fmt(statistics.median(xs)) if xs else "ERR"

    def ratio(self, cfg, job):
        rs = self.paired(cfg, "plain", job)
        if not rs:
            return "n/a"
        if self.rounds == 1:
            return f"{rs[0]:.2f}"
        return spread(rs) + self.missing(len(rs))

    def missing(self, n):
        return "" if n == self.rounds else f" [{n} of {self.rounds} rounds]"

    def order(self, rnd):
        k = rnd % len(self.cfgs)
        return self.cfgs[k:] + self.cfgs[:k]


def run_json(outdir, rounds, cfg, job, rnd):
    """One run's JSON (fio writes log lines before it, hence the index)."""
    name = f"{cfg}-{job}" if rounds == 1 else f"{cfg}-{job}-r{rnd}"
    t = open(f"{outdir}/{name}.json").read()
    return json.loads(t[t.index("{"):])


def per_round(outdir, rounds, cfg, job, pick):
    """pick(json) for every round whose JSON is readable."""
    out = []
    for r in range(rounds):
        try:
            out.append(pick(run_json(outdir, rounds, cfg, job, r)))
        except Exception:
            pass
    return out


def header(m, runs):
    print(f"# pbfs filesystem benchmark, {m['date']} UTC\n")
    print(f"- machine: {m['nproc']} cores ({m['cpu']}), {m['mem']}, kernel {m['kernel']}")
    print(f"- filesystem under test: {m['fs']}")
    if m.get("jsep"):
        print(f"- journals: pbfs-jsep's is {m['jsep']}; every other pbfs configuration's is beside its volume")
    print(f"- pbfs binary: {m['binary']}")
    print(f"- tools: {m['versions']}")
    print(f"- parameters: {m['params']}")
    print(f"- load average before / after: {m['load_before']} / {m['load_after']}; wall time {m['elapsed']} s")
    if runs.rounds > 1:
        n = len(runs.cfgs)
        orders = "; ".join(f"round {r}: {', '.join(runs.order(r))}" for r in range(min(runs.rounds, n)))
        more = ", and so on" if runs.rounds > n else ""
        uneven = "" if runs.rounds % n == 0 else (
            f" ({runs.rounds} rounds is not a multiple of {n} configurations, so the positions are not evenly shared)")
        print(f"- rounds: {runs.rounds}, each job running every configuration once per round; the order was rotated"
              f" left by one each round ({orders}{more}), so every configuration ran first, second, ... in turn"
              f"{uneven}. Numbers are medians over the rounds; ratios pair the configurations of the same round")
    print(f"- command: `bash benchmarks/fs/run.sh`\n")


def ratio_table(runs):
    print("## Ratio to plain (higher is better; 1.00 = as fast as the plain directory)\n")
    if runs.rounds > 1:
        print(f"Median over the {runs.rounds} rounds of the value divided by plain's in the same round,"
              " min-max in brackets.\n")
    others = [c for c in runs.cfgs if c != "plain"]
    hdr = ["job"] + [label(c) for c in others]
    has_ref = any(j in REFERENCE for j in runs.jobs)
    if has_ref:
        hdr.append("issue's bindfs reference")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for j in runs.jobs:
        cells = [desc(j)] + [runs.ratio(c, j) for c in others]
        if has_ref:
            cells.append(REFERENCE.get(j, ""))
        print("| " + " | ".join(cells) + " |")


def absolute_table(runs):
    # median.py reads this table: keep one plain number per cell.
    print("\n## Absolute numbers\n")
    if runs.rounds > 1:
        print(f"Median over the {runs.rounds} rounds.\n")
    hdr = ["job", "unit"] + [label(c) for c in runs.cfgs]
    print("| " + " | ".join(hdr) + " |")
    print("|---|---|" + "---:|" * len(runs.cfgs))
    for j in runs.jobs:
        d, u = JOBDESC.get(j, (j, ""))
        print("| " + " | ".join([d, u] + [runs.absolute(c, j) for c in runs.cfgs]) + " |")


def rounds_table(runs):
    """Every round's value, to see whether one round alone moved a median."""
    if runs.rounds == 1:
        return
    print("\n## Every round\n")
    print("The value each run measured; the configuration that ran first in the round is in italics.\n")
    print("| job | round | " + " | ".join(label(c) for c in runs.cfgs) + " |")
    print("|---|---:|" + "---:|" * len(runs.cfgs))
    for j in runs.jobs:
        for r in range(runs.rounds):
            first = runs.order(r)[0]
            cells = []
            for c in runs.cfgs:
                v = fmt(runs.val.get((c, j, r), ""))
                cells.append(f"*{v}*" if c == first and v else v)
            print(f"| {desc(j)} | {r} | " + " | ".join(cells) + " |")


def pbfs_vs_bindfs(runs):
    if runs.rounds == 1 or "pbfs" not in runs.cfgs or "bindfs" not in runs.cfgs:
        return
    print("\n## pbfs against bindfs, paired by round\n")
    print("pbfs's value divided by bindfs's in the same round (above 1.00: pbfs is faster), median (min-max)"
          " over the rounds, and in how many rounds pbfs was ahead.\n")
    print("| job | pbfs / bindfs | pbfs ahead |")
    print("|---|---|---:|")
    for j in runs.jobs:
        rs = runs.paired("pbfs", "bindfs", j)
        if not rs:
            print(f"| {desc(j)} | n/a | |")
            continue
        ahead = sum(r > 1 for r in rs)
        print(f"| {desc(j)} | {spread(rs)}{runs.missing(len(rs))} | {ahead} of {len(rs)} rounds |")


def smallfiles_table(runs, outdir):
    if "smallfiles" not in runs.jobs:
        return
    print("\n## Small-file job, by phase\n")
    if runs.rounds > 1:
        print(f"Median over the {runs.rounds} rounds.\n")
    print("| config | files | creates/s | unlinks/s |")
    print("|---|---:|---:|---:|")
    for c in runs.cfgs:
        s = per_round(outdir, runs.rounds, c, "smallfiles",
                      lambda j: (j["files"], j["creates_per_s"], j["unlinks_per_s"]))
        if not s:
            print(f"| {label(c)} | ERR | | |")
            continue
        files, creates, unlinks = (statistics.median(x) for x in zip(*s))
        print(f"| {label(c)} | {round(files)} | {creates:,.0f} | {unlinks:,.0f} |")


def latency_table(runs, outdir):
    fio_jobs = [(j, d) for j, d in (("randwrite", "write"), ("randread", "read")) if j in runs.jobs]
    if not fio_jobs:
        return
    print("\n## fio latency (mean / p99, microseconds)\n")
    if runs.rounds > 1:
        print(f"Median over the {runs.rounds} rounds of each.\n")
    print("| config | " + " | ".join(j for j, _ in fio_jobs) + " |")
    print("|---|" + "---:|" * len(fio_jobs))

    def clat(d):
        def pick(j):
            x = j["jobs"][0][d]["clat_ns"]
            return x["mean"], x.get("percentile", {}).get("99.000000", 0)
        return pick

    for c in runs.cfgs:
        cells = []
        for j, d in fio_jobs:
            s = per_round(outdir, runs.rounds, c, j, clat(d))
            if not s:
                cells.append("ERR")
                continue
            mean, p99 = (statistics.median(x) for x in zip(*s))
            cells.append(f"{mean / 1000:,.1f} / {p99 / 1000:,.1f}")
        print(f"| {label(c)} | " + " | ".join(cells) + " |")
    print("\n(For randwrite this is the write call alone; the fdatasync after each write is not in clat.)")


def barrier_table(runs, path):
    drain = {}
    for line in open(path):
        cfg, job, rnd, ms = line.rstrip("\n").split("\t")
        drain.setdefault((cfg, job), []).append(ms)
    if not drain:
        return
    bc = [c for c in runs.cfgs if c.startswith("pbfs")]
    print("\n## Barrier right after each job (ms)\n")
    print("Not part of the numbers above: the time `pbfs barrier` took once the job had finished, i.e. how much")
    print("captured data was still on its way into the journal.", end="")
    print(" Median / max over the rounds.\n" if runs.rounds > 1 else "\n")
    print("| job | " + " | ".join(label(c) for c in bc) + " |")
    print("|---|" + "---:|" * len(bc))

    def cell(c, j):
        ms = drain.get((c, j))
        if not ms:
            return "ERR"
        if runs.rounds == 1:
            return ms[0]
        xs = [float(x) for x in ms]
        return f"{statistics.median(xs):.0f} / {max(xs):.0f}"

    for j in runs.jobs:
        print(f"| {desc(j)} | " + " | ".join(cell(c, j) for c in bc) + " |")


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    results, errors, outdir, barriers = sys.argv[1:5]
    # Run by hand (without run.sh's environment), unknown metadata says so.
    m = collections.defaultdict(lambda: "unknown")
    m.update((k[len("BENCH_META_"):].lower(), v) for k, v in os.environ.items() if k.startswith("BENCH_META_"))
    runs = Runs(results)
    header(m, runs)
    ratio_table(runs)
    absolute_table(runs)
    rounds_table(runs)
    pbfs_vs_bindfs(runs)
    smallfiles_table(runs, outdir)
    latency_table(runs, outdir)
    barrier_table(runs, barriers)
    err = open(errors).read().strip()
    print("\n## Errors\n")
    print("```\n" + err + "\n```" if err else "None: every job finished and no mount process logged anything above INFO.")


if __name__ == "__main__":
    main()
