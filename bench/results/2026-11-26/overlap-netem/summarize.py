#!/usr/bin/env python3
"""Medians of bench/overlap.py's CSVs here: per batch (compute over comm), each
configuration's ms per step and its ratio to max(compute, comm) of the same
repetition; writes summary.csv (what plot.gp draws) and prints it.
`summarize.py pinned`: the same of pinned/bB/overlap_1gbit.csv (the runs with
bench/overlap.py --pin) into pinned/summary.csv."""
import csv
import statistics as st
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else None

rows = []
for b in (512, 1024, 2048, 3072):
    with open(f"{folder}/b{b}/overlap_1gbit.csv" if folder else f"batch{b}.csv") as f:
        data = [r for r in csv.DictReader(line for line in f if not line.startswith("#"))]
    by = {}
    for r in data:
        by.setdefault(r["config"], []).append(r)
    ratio = st.median(float(c["ms_per_step"]) / float(m["ms_per_step"])
                      for c, m in zip(by["compute"], by["comm"]))
    out = {"batch": b, "compute_over_comm": f"{ratio:.2f}"}
    for cfg, rs in by.items():
        out[f"{cfg}_ms"] = f"{st.median(float(r['ms_per_step']) for r in rs):.1f}"
        out[f"{cfg}_ratio_to_max"] = f"{st.median(float(r['ratio_to_max']) for r in rs):.3f}"
        if cfg in ("whole", "buckets", "ordered"):
            lo = min(float(r["ratio_to_max"]) for r in rs)
            hi = max(float(r["ratio_to_max"]) for r in rs)
            out[f"{cfg}_range"] = f"{lo:.2f}-{hi:.2f}"
    rows.append(out)
summary = f"{folder}/summary.csv" if folder else "summary.csv"
with open(summary, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
with open(summary) as f:
    print(f.read(), end="")
