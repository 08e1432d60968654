#!/usr/bin/env python3
"""Time per step of each system in steps/RATE-pP/torch_RATE.csv (and, named
_nowarmup, of topk-nowarmup/: Top-k without the job's 50 dense steps): the elapsed time
between rank 0's first and second evaluation over the S steps between them (S = 10 at
1gbit, 5 at 100mbit; one evaluation of 500 test images included). Writes steps.csv and
prints it as a table."""
import csv
import os

cells = [("1gbit", 4, 10), ("1gbit", 2, 10), ("100mbit", 4, 5), ("100mbit", 2, 5)]
times = {}
for folder, suffix in (("steps", ""), ("topk-nowarmup", "_nowarmup")):
    for rate, p, s in cells:
        path = f"{folder}/{rate}-p{p}/torch_{rate}.csv"
        if not os.path.exists(path):
            continue
        for r in csv.DictReader(open(path)):
            if r["epoch"] == "1":
                e1 = float(r["elapsed_s"])
            elif r["epoch"] == "2":
                times.setdefault(r["system"] + suffix, {})[(rate, p)] = \
                    (float(r["elapsed_s"]) - e1) / s
with open("steps.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["system"] + [f"{rate}_P{p}_s_per_step" for rate, p, _ in cells])
    for sys_, t in times.items():
        w.writerow([sys_] + [f"{t[(rate, p)]:.3f}" if (rate, p) in t else ""
                             for rate, p, _ in cells])
print(open("steps.csv").read(), end="")
