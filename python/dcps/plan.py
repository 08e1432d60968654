"""python3 -m dcps.plan: how many shards a job needs, and what throughput to expect.

usage: python3 -m dcps.plan --params N --workers W --link 10gbit --step-ms T
                            [--density D] [--rule R] [--mode async|sync] [--batch B]
                            [--shards S | --max-shards S] [--latency-us L] [--steps K]

It runs dcps.sim (a discrete-event model of the job: each worker on a host with
one NIC of --link each way, each shard on a host of its own, every message's
bytes as libdcps encodes them, every shard handling its messages one at a time at
the CPU cost bench/shardcap measured for the rule) for 1, 2, 4, ... shards up to
--max-shards (or only --shards), and prints per shard count the predicted
samples/s, the scaling efficiency (throughput over W workers computing with free
communication), the busiest shard's CPU and the busiest link, then the fewest
shards within 5% of the best. --density D means Top-k pushes at D with delta pulls
at D; without it, dense pushes and pulls.

Everything it prints is a prediction. The costs are measurements of one shard on
a 2-core AMD EPYC (bench/results/2026-11-26/shardcap/, taken while other work
loaded the machine); the model is checked against emulated-network runs in
bench/results/2026-11-26/sim/validation.csv, which says where it holds.
"""
import argparse
import math
import re
import sys

try:
    from .sim import Cluster, Costs, Job, simulate
except ImportError:  # bench/sim/ loads plan.py and sim.py from the source tree, unbuilt
    from sim import Cluster, Costs, Job, simulate

# A shard's CPU per message, in nanoseconds, from bench/shardcap on a shard of
# 1,048,576 parameters (bench/results/2026-11-26/shardcap/async-1M.csv, async, the
# row marked saturated of each rule and encoding): dense push and dense pull per
# parameter; Top-k push per entry (rules that touch only the pushed entries) or
# per parameter (rules whose sparse push is a pass over the range: momentum, Adam,
# AdamW and Adagrad unless lazy); a delta pull per parameter of the range (the
# scan for what changed: the cycle's CPU less the push's).
RULES = {
    #                 dense push, dense pull, sparse/entry, sparse/param, delta/param
    "sgd": (1.26, 0.43, 7.6, 0.0, 0.44),
    "momentum": (1.34, 0.36, 0.0, 0.45, 0.70),
    "adam": (4.70, 0.58, 0.0, 3.75, 0.70),
    "adamw": (4.28, 0.37, 0.0, 3.76, 0.58),
    "adagrad": (3.79, 0.52, 0.0, 2.91, 0.62),
    "momentum_lazy": (1.34, 0.36, 16.6, 0.0, 0.70),
    "adam_lazy": (4.70, 0.58, 19.6, 0.0, 0.70),
    "dcasgd": (1.17, 0.64, 12.1, 0.0, 0.35),
    "dcasgd_a": (1.57, 0.75, 28.4, 0.0, 0.68),
}
# Per parameter, a dense DC-ASGD-a push cost 3.4 ns on a shard of 12,665,216
# parameters (netem-shard-*.csv) against 1.57 at 1M: the larger range no longer
# fits the caches. Passes over the range of a shard above 4M parameters are
# scaled by that ratio.
LARGE_SHARD = 4_000_000
LARGE_FACTOR = 3.4 / 1.57


def costs_for(rule: str, shard_params: int) -> Costs:
    dp, dl, se, sp, dd = RULES[rule]
    f = LARGE_FACTOR if shard_params > LARGE_SHARD else 1.0
    return Costs(push_dense_per_param=dp * f * 1e-9, pull_dense_per_param=dl * 1e-9,
                 push_sparse_per_entry=se * 1e-9, push_sparse_per_param=sp * f * 1e-9,
                 pull_delta_per_param=dd * 1e-9)


def parse_link(text: str) -> float:
    """'10gbit', '25Gbit', '100mbit', or bits per second; raises ValueError."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmg]?)(?:bit)?\s*", text.lower())
    if not m or (m.group(2) == "" and not text.strip().isdigit() and "bit" not in text.lower()):
        raise ValueError(f"--link: {text!r} is not a rate like 10gbit, 100mbit or 1e9")
    v = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    if not 1e6 <= v <= 1e12:
        raise ValueError(f"--link: {text!r} is outside 1mbit to 1000gbit")
    return v


def _positive_int(name, lo, hi):
    def conv(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not a whole number")
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{name}: {v} is outside {lo} to {hi}")
        return v
    return conv


def _real(name, lo, hi, lo_open=False):
    def conv(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not a number")
        if not math.isfinite(v) or (v <= lo if lo_open else v < lo) or v > hi:
            raise argparse.ArgumentTypeError(
                f"{name}: {text} is outside {'(' if lo_open else '['}{lo}, {hi}]")
        return v
    return conv


def _link(text):
    try:
        return parse_link(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def build_parser():
    ap = argparse.ArgumentParser(prog="python3 -m dcps.plan",
                                 description="Shards and throughput of a dcps job, predicted "
                                             "by dcps.sim from measured shard costs.")
    ap.add_argument("--params", required=True, type=_positive_int("--params", 64, 2**34),
                    help="model parameters (float32)")
    ap.add_argument("--workers", required=True, type=_positive_int("--workers", 1, 4096))
    ap.add_argument("--link", required=True, type=_link,
                    help="each host's NIC, each way: 1gbit, 10gbit, 25gbit, ...")
    ap.add_argument("--step-ms", required=True, type=_real("--step-ms", 0, 1e6, lo_open=True),
                    help="a worker's compute per step (forward + backward), ms")
    ap.add_argument("--density", type=_real("--density", 0, 1, lo_open=True),
                    help="Top-k pushes and delta pulls at this density; absent: dense")
    ap.add_argument("--rule", default="dcasgd_a", choices=sorted(RULES),
                    help="the shards' update rule (default dcasgd_a)")
    ap.add_argument("--mode", default="async", choices=["async", "sync"])
    ap.add_argument("--batch", type=_positive_int("--batch", 1, 1 << 20), default=64)
    ap.add_argument("--shards", type=_positive_int("--shards", 1, 1024),
                    help="only this shard count")
    ap.add_argument("--max-shards", type=_positive_int("--max-shards", 1, 1024), default=32)
    ap.add_argument("--latency-us", type=_real("--latency-us", 0, 1e6), default=50.0,
                    help="one-way latency per message (default 50)")
    ap.add_argument("--steps", type=_positive_int("--steps", 2, 10000), default=8,
                    help="simulated steps per worker (default 8)")
    return ap


def predict(a, shards: int):
    job = Job(params=a.params, workers=a.workers, shards=shards, mode=a.mode,
              push="topk" if a.density else "dense", pull="delta" if a.density else "dense",
              density=a.density or 1.0, batch=a.batch, compute_s=a.step_ms / 1e3,
              steps=a.steps)
    cl = Cluster(link_bps=a.link, latency_s=a.latency_us * 1e-6)
    return simulate(job, cl, costs_for(a.rule, -(-a.params // shards)))


def main(argv=None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    if a.shards and a.shards > a.params // 64:
        ap.error(f"--shards: {a.shards} shards would leave some without parameters")
    counts = [a.shards] if a.shards else [
        s for s in (2**i for i in range(11)) if s <= min(a.max_shards, a.params // 64)]
    ideal = a.workers * a.batch / (a.step_ms / 1e3)
    enc = f"Top-k {a.density:g} + delta pulls" if a.density else "dense pushes and pulls"
    print(f"# dcps.plan: {a.params} parameters, {a.workers} workers, {a.link / 1e9:g} Gbit/s "
          f"links, {a.step_ms:g} ms compute per step, batch {a.batch}, {enc}, {a.mode}, "
          f"rule {a.rule}")
    print("# predicted by dcps.sim from shard costs measured by bench/shardcap "
          "(docs/operating.md, Planning); ideal (free communication): "
          f"{ideal:.0f} samples/s")
    if a.mode == "sync" and a.density:
        print("# sync with delta pulls: the model charges every pull a pass over the range; "
              "the shard computes the shared mirror's delta once per round, so the shard "
              "CPU here is an upper bound")
    print("shards,samples_per_s,efficiency,step_ms,shard_cpu,busiest_link,link_util")
    rows = []
    for s in counts:
        r = predict(a, s)
        link, util = max(r.link_util.items(), key=lambda kv: kv[1])
        rows.append((s, r.samples_per_s))
        print(f"{s},{r.samples_per_s:.0f},{r.samples_per_s / ideal:.3f},{r.step_s * 1e3:.1f},"
              f"{max(r.shard_util):.2f},{link},{util:.2f}")
    best = max(t for _, t in rows)
    pick = min(s for s, t in rows if t >= 0.95 * best)
    print(f"# recommended: {pick} shard{'s' if pick > 1 else ''} "
          f"({dict(rows)[pick]:.0f} samples/s predicted, {dict(rows)[pick] / ideal:.0%} of ideal)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
