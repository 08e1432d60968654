#!/usr/bin/env python3
"""Time per step of every system of issue 30's section 5 in every cell:
2026-11-26's steps.csv (../../2026-11-26/ddp-wide/, which says how each was
measured) with the two systems it lacked, fp16 and Top-k with buckets and no
ordered pulls, measured here the same way (steps3/: three passes of S steps, S =
10 at 1gbit, 5 at 100mbit; the time between rank 0's evaluations after passes 1
and 2 over S; Top-k without the job's 50 dense steps). Writes steps.csv and
prints it."""
import csv

cells = [("1gbit", 4, 10), ("1gbit", 2, 10), ("100mbit", 4, 5), ("100mbit", 2, 5)]
rows = list(csv.reader(open("../../2026-11-26/ddp-wide/steps.csv")))
new = {}
for folder in ("steps3/{rate}-p{p}", "steps3/topk-{rate}-p{p}"):
    for rate, p, s in cells:
        e = {}
        for r in csv.DictReader(open(f"{folder.format(rate=rate, p=p)}/torch_{rate}.csv")):
            e[(r["system"], r["epoch"])] = float(r["elapsed_s"])
        for (system, epoch), t in e.items():
            if epoch == "2":
                new.setdefault(system, {})[(rate, p)] = (t - e[(system, "1")]) / s
for system, t in new.items():
    rows.append([system] + [f"{t[(rate, p)]:.3f}" for rate, p, _ in cells])
order = ["compute", "ddp_linear", "ddp_fp16", "ddp_powersgd"] + [
    f"dcps_{v}{s}" for v in ("dense", "fp16", "topk") for s in ("_comm", "", "_buckets", "_ordered")]
body = sorted(rows[1:], key=lambda r: order.index(r[0]))
with open("steps.csv", "w", newline="") as f:
    csv.writer(f).writerows([rows[0]] + body)
print(open("steps.csv").read(), end="")
