#!/usr/bin/env python3
"""Time per step of each system: the elapsed time between rank 0's evaluations
after passes 1 and 2, over the S steps between them (S = 10 at 1gbit, 5 at
100mbit; one evaluation of 500 test images included in each number). DDP's rows
come from steps/ (two passes: DDP's second report is the end of its loop),
dcps.torch's from steps3/ (three passes, so that neither report includes the
final exact pull of dcps.torch's finish(); Top-k from steps3/topk-*, without the
example job's 50 dense steps), compute alone and communication alone from
breakdown/ where it was run. Writes steps.csv and prints it."""
import csv
import os

cells = [("1gbit", 4, 10), ("1gbit", 2, 10), ("100mbit", 4, 5), ("100mbit", 2, 5)]
sources = [("steps/{rate}-p{p}", lambda s: s.startswith("ddp")),
           ("steps3/{rate}-p{p}", None), ("steps3/topk-{rate}-p{p}", None),
           ("breakdown/{rate}-p{p}", None), ("breakdown/topk-{rate}-p{p}", None)]
times = {}
for folder, keep in sources:
    for rate, p, s in cells:
        path = f"{folder.format(rate=rate, p=p)}/torch_{rate}.csv"
        if not os.path.exists(path):
            continue
        e1 = {}
        for r in csv.DictReader(open(path)):
            if keep and not keep(r["system"]):
                continue
            if r["epoch"] == "1":
                e1[r["system"]] = float(r["elapsed_s"])
            elif r["epoch"] == "2":
                times.setdefault(r["system"], {})[(rate, p)] = \
                    (float(r["elapsed_s"]) - e1[r["system"]]) / s
with open("steps.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["system"] + [f"{rate}_P{p}_s_per_step" for rate, p, _ in cells])
    for sys_, t in times.items():
        w.writerow([sys_] + [f"{t[(rate, p)]:.3f}" if (rate, p) in t else ""
                             for rate, p, _ in cells])
print(open("steps.csv").read(), end="")
