#!/usr/bin/env python3
"""Merge benchmarks/fs/run.sh's results into summary.json.

usage: summary.py RESULTS SUMMARY_JSON

  RESULTS       run.sh's tab-separated config, job, round, value (a number,
                or ERR)
  SUMMARY_JSON  the summary file to merge into (created if missing); its
                other workloads, and the other scenarios of these, stay

Each job becomes workload "fs-<job>" (benchmark "fs"), each configuration a
scenario ("pbfs" is named "pbfs-0", as in the other benchmarks: a mount
without backups). throughput is the median over the rounds; ratio_to_plain
is the median of the ratios paired within each round; a round whose value
is ERR counts in errors. These jobs report no latencies (p50/p95/p99 are
0). docs/PERFORMANCE.md ("summary.json") documents the keys.
"""
import collections
import datetime
import json
import os
import statistics
import sys

UNITS = {"seqwrite": "MiB", "randwrite": "IOs", "randread": "IOs",
         "smallfiles": "files", "sqlite": "transactions"}
NAMES = {"pbfs": "pbfs-0"}


def main(results, path):
    vals = collections.defaultdict(dict)  # (job, cfg) -> round -> value
    for line in open(results):
        cfg, job, rnd, val = line.rstrip("\n").split("\t")
        vals[(job, cfg)][int(rnd)] = val
    summary = {"workloads": {}}
    if os.path.exists(path):
        with open(path) as f:
            summary = json.load(f)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    jobs = sorted({job for job, _ in vals})
    for job in jobs:
        w = summary["workloads"].setdefault(
            "fs-" + job, {"benchmark": "fs", "unit": UNITS.get(job, job), "scenarios": {}})
        w["updated"] = now
        plain = vals.get((job, "plain"), {})
        for (j, cfg), rounds in vals.items():
            if j != job:
                continue
            good = {r: float(v) for r, v in rounds.items() if v != "ERR"}
            ratios = [good[r] / float(plain[r]) for r in good
                      if plain.get(r, "ERR") != "ERR" and float(plain[r]) > 0]
            w["scenarios"][NAMES.get(cfg, cfg)] = {
                "throughput": statistics.median(good.values()) if good else 0,
                "p50_ms": 0, "p95_ms": 0, "p99_ms": 0,
                "errors": len(rounds) - len(good),
                "ratio_to_plain": statistics.median(ratios) if ratios else 0,
            }
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(summary, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
