#!/usr/bin/env python3
"""Combine several benchmarks/results/fs-*.md reports into one table.

For every job and configuration it prints the median ratio to plain over
the runs (each run's ratio pairs plain and the configuration measured
minutes apart on the same machine) and the range, then the median absolute
numbers. A report of several rounds (BENCH_ROUNDS) holds each configuration's
median over its rounds in that table, so for it this gives a ratio of
medians; the report's own ratios are paired within each round.

usage: python3 benchmarks/fs/median.py benchmarks/results/fs-A.md fs-B.md ...
"""
import statistics
import sys

REFERENCE = {  # bindfs ratios to plain quoted by the issue
    "4 KiB random write, fdatasync each": "0.68",
    "small files: create+write 4 KiB, unlink": "0.35",
    "SQLite WAL single-row INSERT tx": "0.57",
}


def absolute_table(path):
    """Return (configs, {job: (unit, {config: value})}) from one report."""
    lines = open(path).read().splitlines()
    start = lines.index("## Absolute numbers")
    rows = [l for l in lines[start + 1:] if l.startswith("|")]
    end = next((i for i, l in enumerate(lines[start + 1:]) if l.startswith("## ")), None)
    if end is not None:
        rows = [l for l in lines[start + 1:start + 1 + end] if l.startswith("|")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    configs = head[2:]
    out = {}
    for r in rows[2:]:
        cells = [c.strip() for c in r.strip("|").split("|")]
        vals = {}
        for c, v in zip(configs, cells[2:]):
            try:
                vals[c] = float(v.replace(",", ""))
            except ValueError:
                pass
        out[cells[0]] = (cells[1], vals)
    return configs, out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    runs = [absolute_table(p) for p in sys.argv[1:]]
    configs = runs[0][0]
    jobs = list(runs[0][1])
    others = [c for c in configs if c != "plain"]
    print(f"Median over {len(runs)} runs of the ratio to plain (min-max in brackets):\n")
    hdr = ["job"] + others + ["issue's bindfs reference"]
    print("| " + " | ".join(hdr) + " |")
    print("|---|" + "---|" * (len(hdr) - 1))
    for j in jobs:
        cells = [j]
        for c in others:
            rs = [t[j][1][c] / t[j][1]["plain"] for _, t in runs
                  if j in t and c in t[j][1] and t[j][1].get("plain")]
            cells.append(f"**{statistics.median(rs):.2f}** ({min(rs):.2f}-{max(rs):.2f})" if rs else "n/a")
        cells.append(REFERENCE.get(j, ""))
        print("| " + " | ".join(cells) + " |")
    print(f"\nMedian absolute numbers over {len(runs)} runs:\n")
    print("| job | unit | " + " | ".join(configs) + " |")
    print("|---|---|" + "---:|" * len(configs))
    for j in jobs:
        cells = [j, runs[0][1][j][0]]
        for c in configs:
            vs = [t[j][1][c] for _, t in runs if j in t and c in t[j][1]]
            if not vs:
                cells.append("n/a")
                continue
            m = statistics.median(vs)
            cells.append(f"{m:,.0f}" if m >= 100 else f"{m:,.1f}")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
