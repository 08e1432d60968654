#!/usr/bin/env python3
"""The GPU overlap runs here as one table: for each run (before-subparts,
after-subparts, final) and batch, compute alone over communication alone and
each configuration's time per step over max(compute, comm) of the same
repetition, both repetitions (bench/overlap.py's ratio_to_max); writes
summary.csv and prints it, and the means of the two repetitions of each run
into means.csv (what plot.gp draws)."""
import csv

CONFIGS = ("whole", "buckets", "ordered")
out, means = [], []
for run in ("before-subparts", "after-subparts", "final"):
    for b in (4096, 16384, 32768, 65536):
        with open(f"{run}/overlap-b{b}.csv") as f:
            rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
        ms = {(r["rep"], r["config"]): float(r["ms_per_step"]) for r in rows}
        ratio = {(r["rep"], r["config"]): r["ratio_to_max"] for r in rows}
        reps = sorted({r["rep"] for r in rows})
        row = {"run": run, "batch": b,
               "compute_over_comm": "/".join(f"{ms[k, 'compute'] / ms[k, 'comm']:.2f}"
                                             for k in reps)}
        mean = {"run": run, "batch": b,
                "compute_over_comm": sum(ms[k, "compute"] / ms[k, "comm"] for k in reps) / len(reps)}
        for c in CONFIGS:
            row[c] = "/".join(ratio.get((k, c), "") for k in reps).strip("/")
            got = [float(ratio[k, c]) for k in reps if (k, c) in ratio]
            mean[c] = sum(got) / len(got) if got else float("nan")
        out.append(row)
        means.append(mean)
with open("summary.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(out[0]))
    w.writeheader()
    w.writerows(out)
with open("means.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(means[0]))
    w.writeheader()
    w.writerows({k: f"{v:.3f}" if isinstance(v, float) else v for k, v in m.items()}
                for m in means)
with open("summary.csv") as f:
    print(f.read(), end="")
