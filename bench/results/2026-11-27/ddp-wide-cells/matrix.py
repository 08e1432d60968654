#!/usr/bin/env python3
"""Issue 30's section 5 matrix of FashionWide runs to accuracy: for each cell
(link, P) and each system, the elapsed time at which rank 0's test accuracy
first reached 0.82 (after which pass; the day of the run), from every run to accuracy of
2026-11-26 (../../2026-11-26/ddp-wide/), 2026-11-27's fp16 hook on 100 Mbit/s
(../fp16-100mbit/) and this folder's. A system run without the example job's
50 dense steps (a topk-nowarmup folder) is named so. Writes matrix.csv and
prints it."""
import csv
import glob

OLD = "../../2026-11-26/ddp-wide/"
sources = {
    ("1gbit", 4): [OLD + "p4-1gbit", OLD + "tuned-p4-1gbit/powersgd",
                   OLD + "tuned-p4-1gbit/topk-nowarmup", "p4-1gbit"],
    ("1gbit", 2): [OLD + "p2-1gbit", OLD + "tuned-p2/1gbit-powersgd",
                   OLD + "tuned-p2/1gbit-topk-nowarmup", "p2-1gbit"],
    ("100mbit", 4): [OLD + "p4-100mbit/powersgd", OLD + "p4-100mbit/topk-nowarmup",
                     OLD + "repeats/p4-100mbit-powersgd-r1", "../fp16-100mbit",
                     "p4-100mbit-topk-nowarmup", "p4-100mbit-ddp"],
    ("100mbit", 2): [OLD + "tuned-p2/100mbit-powersgd", OLD + "tuned-p2/100mbit-topk-nowarmup",
                     "p2-100mbit-topk-nowarmup", "p2-100mbit-ddp", "p2-100mbit-powersgd"],
}
TARGET = 0.82
cells = list(sources)
result = {}
for cell, folders in sources.items():
    for folder in folders:
        for path in glob.glob(f"{folder}/torch_*.csv"):
            runs = {}
            for r in csv.DictReader(open(path)):
                runs.setdefault(r["system"], []).append(r)
            for system, rows in runs.items():
                name = system + (" (no dense steps)" if "nowarmup" in folder else "")
                day = "11-26" if folder.startswith(OLD) else "11-27"
                hit = next((r for r in rows if float(r["test_acc"]) >= TARGET), None)
                if hit:
                    result.setdefault(name, {})[cell] = \
                        f"{float(hit['elapsed_s']):.1f} s ({hit['epoch']}; {day})"
                else:
                    best = max(float(r["test_acc"]) for r in rows)
                    result.setdefault(name, {})[cell] = \
                        f"not in {len(rows)} passes ({best:.3f}; {day})"
with open("matrix.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["system"] + [f"{rate}_P{p}" for rate, p in cells])
    for name in sorted(result):
        w.writerow([name] + [result[name].get(c, "") for c in cells])
print(open("matrix.csv").read(), end="")
print("\n| system | " + " | ".join(f"{rate}, P = {p}" for rate, p in cells) + " |")
print("|---" * (len(cells) + 1) + "|")
for name in sorted(result):
    print(f"| {name} | " + " | ".join(result[name].get(c, "") for c in cells) + " |")
