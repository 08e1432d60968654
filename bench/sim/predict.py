#!/usr/bin/env python3
"""bench/sim/predict.py: dcps.sim's predictions at cluster scale (issue 31, part 4).

usage: bench/sim/predict.py [--out DIR] [--workers 8,16,...] [--shards 1,2,...]
                            [--links 1,10,25] [--steps K] [--models NAME,...]

For gTop-k's four models, P workers (one GPU each, a host each), 1, 10 and 25
Gbit/s NICs, dense pushes and pulls against Top-k 0.1% pushes with delta pulls at
0.1%, async DC-ASGD-a, and 1 to 32 shards on hosts of their own, it simulates K
steps per worker (default 6) and writes DIR/predictions.csv (every cell), DIR/best.csv
(per model, link, P and encoding: the best shard count and the fewest within 5% of
it) and gnuplot PNGs: efficiency_MODEL.png (scaling efficiency against P at the
best shard count) and shards_MODEL.png (throughput against shards at 10 Gbit/s).
Scaling efficiency = samples/s over P x (batch / compute time): the share of the
workers' compute rate the job keeps. Shard costs: dcps.plan's (bench/shardcap).

Compute times: the three CNNs' are published figures for one GPU (GTX 1080 Ti), named
in MODELS; the LSTM's is an assumption, labelled so in MODELS and docs/experiments.md.
"""
import argparse
import csv
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# The modules themselves, from the source tree (the package needs its built extension).
sys.path.insert(0, os.path.join(ROOT, "python", "dcps"))
from plan import costs_for  # noqa: E402
from sim import Cluster, Job, simulate  # noqa: E402

# name: (parameters, batch per worker, compute ms per step, where the time comes from)
# The three CNNs: one forward and backward pass of a batch of 16 images (224 x 224)
# on one GeForce GTX 1080 Ti with cuDNN 5.1.10, Torch, "Total (ms)" of the tables in
# J. Johnson, cnn-benchmarks (github.com/jcjohnson/cnn-benchmarks, README.md):
# AlexNet 13.89 ms, VGG-16 128.14 ms, ResNet-50 101.21 ms. Published figures for one
# named GPU, taken as they are (batch 16, no scaling); the optimizer's own step is
# not in them (the shards apply the update here). LSTM on PTB: no published step time
# was found; 100 ms for a batch of 20 sequences is an assumption.
GTX1080TI = "published: GTX 1080 Ti, batch 16 (jcjohnson/cnn-benchmarks)"
MODELS = {
    "vgg16": (138_357_544, 16, 128.14, GTX1080TI),
    "resnet50": (25_557_032, 16, 101.21, GTX1080TI),
    "alexnet": (61_100_840, 16, 13.89, GTX1080TI),
    "lstm_ptb": (66_034_000, 20, 100.0, "assumed: no published figure found"),
}
ENCODINGS = {"dense": ("dense", "dense", 1.0), "topk0.001_delta": ("topk", "delta", 0.001)}


def ints(text, name):
    try:
        v = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: {text!r} is not a list of whole numbers")
    if not v or any(x < 1 for x in v):
        raise argparse.ArgumentTypeError(f"{name}: {text!r} has a count below 1")
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/2026-11-26/sim"))
    ap.add_argument("--workers", type=lambda t: ints(t, "--workers"),
                    default=[8, 16, 32, 64, 128, 256])
    ap.add_argument("--shards", type=lambda t: ints(t, "--shards"), default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--links", type=lambda t: ints(t, "--links"), default=[1, 10, 25])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--plot-only", action="store_true",
                    help="simulate nothing: draw the PNGs again from DIR's CSVs")
    a = ap.parse_args()
    models = a.models.split(",")
    for m in models:
        if m not in MODELS:
            ap.error(f"--models: unknown model {m!r} (known: {', '.join(MODELS)})")
    if a.steps < 2:
        ap.error("--steps: at least 2")
    os.makedirs(a.out, exist_ok=True)
    if a.plot_only:
        def load(name, ints_=()):
            with open(os.path.join(a.out, name)) as f:
                out = list(csv.DictReader(f))
            for r in out:
                for k in ints_:
                    r[k] = int(r[k])
            return out
        rows = load("predictions.csv", ("link_gbit", "workers", "shards"))
        best = load("best.csv", ("link_gbit", "workers"))
        plot(a, models, best, rows)
        return 0
    rows = []
    for m in models:
        n, batch, ms, _ = MODELS[m]
        for gbit in a.links:
            for P in a.workers:
                for enc, (push, pull, d) in ENCODINGS.items():
                    for S in a.shards:
                        job = Job(params=n, workers=P, shards=S, push=push, pull=pull, density=d,
                                  batch=batch, compute_s=ms / 1e3, steps=a.steps)
                        r = simulate(job, Cluster(link_bps=gbit * 1e9, latency_s=50e-6),
                                     costs_for("dcasgd_a", -(-n // S)))
                        ideal = P * batch / (ms / 1e3)
                        link, util = max(r.link_util.items(), key=lambda kv: kv[1])
                        rows.append(dict(model=m, params=n, step_ms=f"{ms:.1f}", link_gbit=gbit,
                                         workers=P, encoding=enc, shards=S,
                                         samples_per_s=f"{r.samples_per_s:.0f}",
                                         efficiency=f"{r.samples_per_s / ideal:.4f}",
                                         shard_cpu=f"{max(r.shard_util):.3f}",
                                         busiest_link=link, link_util=f"{util:.3f}",
                                         mean_staleness=f"{r.mean_staleness():.1f}"))
                print(f"{m} {gbit} Gbit/s P={P} done", file=sys.stderr, flush=True)
    with open(os.path.join(a.out, "predictions.csv"), "w") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    best = []
    keys = sorted({(r["model"], r["link_gbit"], r["workers"], r["encoding"]) for r in rows},
                  key=lambda k: (k[0], k[1], k[3], k[2]))
    for k in keys:
        cell = [r for r in rows if (r["model"], r["link_gbit"], r["workers"], r["encoding"]) == k]
        top = max(cell, key=lambda r: float(r["samples_per_s"]))
        enough = min((r for r in cell if float(r["samples_per_s"]) >= 0.95 * float(top["samples_per_s"])),
                     key=lambda r: r["shards"])
        best.append(dict(model=k[0], link_gbit=k[1], workers=k[2], encoding=k[3],
                         best_shards=top["shards"], best_samples_per_s=top["samples_per_s"],
                         best_efficiency=top["efficiency"], shards_within_5pct=enough["shards"],
                         shard_cpu_at_1=next(r["shard_cpu"] for r in cell if r["shards"] == min(a.shards)),
                         busiest_link_at_best=f"{top['busiest_link']}={top['link_util']}"))
    with open(os.path.join(a.out, "best.csv"), "w") as f:
        w = csv.DictWriter(f, fieldnames=list(best[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(best)
    plot(a, models, best, rows)
    return 0


def gnuplot(png, settings, series):
    """One PNG: the common frame, the settings, then the series."""
    script = (f"set terminal pngcairo size 1000,560 noenhanced\nset output '{png}'\n"
              f"set key outside right\nset grid\n{settings}plot " + ", ".join(series) + "\n")
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def plot(a, models, best, rows):
    """gnuplot PNGs; skipped with a message when gnuplot is missing."""
    try:
        subprocess.run(["gnuplot", "--version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        print("predict.py: no gnuplot: PNGs not drawn", file=sys.stderr)
        return
    data = os.path.join(a.out, ".plot")
    os.makedirs(data, exist_ok=True)
    for m in models:
        series = []
        for gbit in a.links:
            for enc in ENCODINGS:
                path = os.path.join(data, f"{m}-{gbit}-{enc}")
                with open(path, "w") as f:
                    for b in best:
                        if b["model"] == m and b["link_gbit"] == gbit and b["encoding"] == enc:
                            f.write(f"{b['workers']} {b['best_efficiency']}\n")
                dash = "dt 1" if enc == "dense" else "dt 2"
                series.append(f"'{path}' using 1:2 with linespoints {dash} lw 2 "
                              f"title '{gbit} Gbit/s {enc}'")
        gnuplot(f"{a.out}/efficiency_{m}.png",
                "set logscale x 2\nset xlabel 'workers'\nset ylabel 'scaling efficiency'\n"
                "set yrange [0:1.05]\n"
                f'set title "dcps.sim prediction: {m}, {MODELS[m][0] / 1e6:.1f}M parameters, '
                f'{float(MODELS[m][2]):.0f} ms compute per step\\nbest of 1-32 shards, '
                'async DC-ASGD-a"\n', series)
        series = []
        for enc in ENCODINGS:
            for P in (a.workers[0], a.workers[len(a.workers) // 2], a.workers[-1]):
                path = os.path.join(data, f"{m}-shards-{enc}-{P}")
                with open(path, "w") as f:
                    for r in rows:
                        if (r["model"], r["link_gbit"], r["encoding"], r["workers"]) == (m, 10, enc, P):
                            f.write(f"{r['shards']} {r['samples_per_s']}\n")
                dash = "dt 1" if enc == "dense" else "dt 2"
                series.append(f"'{path}' using 1:2 with linespoints {dash} lw 2 title 'P={P} {enc}'")
        if 10 in a.links:
            gnuplot(f"{a.out}/shards_{m}.png",
                    "set logscale xy 2\nset xlabel 'shards'\nset ylabel 'samples/s'\n"
                    f"set title 'dcps.sim prediction: {m}, 10 Gbit/s: throughput against "
                    "shards'\n", series)
    for f in os.listdir(data):
        os.unlink(os.path.join(data, f))
    os.rmdir(data)


if __name__ == "__main__":
    sys.exit(main())
