#!/usr/bin/env python3
"""Medians of bench/overlap.py's CSVs in bB/overlap_1gbit.csv (one folder per
batch): per batch, compute alone over communication alone, each
configuration's ms per step and its ratio to max(compute, comm) of the same
repetition (and the range over the repetitions); writes summary.csv, which
plot.gp draws, ordered by compute over comm, and prints it."""
import csv
import glob
import os
import statistics as st

rows = []
for path in glob.glob("b*/overlap_1gbit.csv"):
    with open(path) as f:
        data = list(csv.DictReader(line for line in f if not line.startswith("#")))
    by = {}
    for r in data:
        by.setdefault(r["config"], []).append(r)
    ratio = st.median(float(c["ms_per_step"]) / float(m["ms_per_step"])
                      for c, m in zip(by["compute"], by["comm"]))
    out = {"batch": int(os.path.dirname(path)[1:]), "compute_over_comm": f"{ratio:.2f}"}
    for cfg, rs in by.items():
        ratios = [float(r["ratio_to_max"]) for r in rs]
        out[f"{cfg}_ms"] = f"{st.median(float(r['ms_per_step']) for r in rs):.1f}"
        out[f"{cfg}_ratio_to_max"] = f"{st.median(ratios):.3f}"
        if cfg in ("whole", "buckets", "ordered"):
            out[f"{cfg}_range"] = f"{min(ratios):.2f}-{max(ratios):.2f}"
    rows.append(out)
rows.sort(key=lambda r: float(r["compute_over_comm"]))
with open("summary.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
with open("summary.csv") as f:
    print(f.read(), end="")
