#!/usr/bin/env python3
"""bench/sim/validate.py: dcps.sim against the bench/netem.sh scaling runs.

usage: bench/sim/validate.py [--netem RUNS.csv ...] [--shardcap DIR] [--worker-cpu CSV]
                             [--out CSV] [--tolerance 0.15] [--cpu-per-byte S | --fit CELL]
                             [--cores measured|2] [--notes CSV]

For every `scaling` row of the netem runs (P = 1, 2, 4, 8; dense, Top-k with dense
pulls, Top-k with delta pulls; 1 and 10 Gbit/s), it simulates the same job on the
same emulated machine — 2 shards and P workers, each on a host whose NIC is the
rate at the payload efficiency bench/netem.sh measured (0.95), every process on the
one pool of 2 cores that all namespaces shared, the workers' 50 ms sleep, the
worker's CPU per step from bench/sim/calibrate.sh, the shard's CPU per message from
bench/shardcap on a shard of the same size and rule (DC-ASGD-a) — and writes one
row per measured cell: config, measured and predicted samples/s (the whole run:
steps, the closing barrier and the final dense pull, as the workers' final:
lines count it), the same for the steady state, and the relative errors. Every
--netem file's rows are kept (repeats of a cell give a row each). One constant is
fitted, not measured: the kernel's CPU per byte moved over the emulated links, set so
that the cell --fit (default 10gbit/dense/P8) of the first file is matched in the steady
state; that row is marked `fitted`. Exit status 0; the column `within` says which cells
are within the tolerance (whole run or steady state).

The cores: bench/netem.sh records per run the CPU its job's processes used and the
machine's idle time (`cores_avail` = the job's cores + the idle cores: what other work and
the hypervisor's steal left the job). With --cores measured (the default) each cell is
simulated on a pool of that many cores, a measured property of the run like the link
rate; runs without the column (before it was recorded) get 2. --cores 2 gives every cell
both cores. `predicted_2cores` is always the latter, for comparison.

`why` says, for every cell not within the tolerance, what the evidence of that run shows
(drops on the links, the shards' loops held up, the cores): rules below, and a note per
cell from --notes (a CSV with the columns source, config, note) where one was written.

The costs it uses are printed on `#` lines at the top of the table.
"""
import argparse
import csv
import glob
import math
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# The module itself, from the source tree (the package needs its built extension).
sys.path.insert(0, os.path.join(ROOT, "python", "dcps"))
from sim import Cluster, Costs, Job, shard_ranges, simulate  # noqa: E402

SCHEMES = {  # netem scheme -> (push, pull, density)
    "dense": ("dense", "dense", 1.0),
    "topk01": ("topk", "dense", 0.01),
    "topk001": ("topk", "dense", 0.001),
    "topk01_delta": ("topk", "delta", 0.01),
    "topk001_delta": ("topk", "delta", 0.001),
}
RATES = {"1gbit": 1e9, "10gbit": 1e10}
# Three runs of every cell with the job's CPU and the machine's idle time recorded (the
# fitted cell in the first). The earlier runs (netem-rerun*, 2026-11-21) lack the cores:
# give them with --netem to simulate them on 2.
DEFAULT_NETEM = [
    "bench/results/2026-11-26/netem-cpu/runs.csv",
    "bench/results/2026-11-26/netem-cpu-2/runs.csv",
    "bench/results/2026-11-26/netem-cpu-3/runs.csv",
]
EFFICIENCY = 0.95  # bench/netem.sh: 0.95 Gbit/s of TCP payload at 1gbit, 9.5 at 10gbit
STALL = re.compile(r"did not run for (\d+) ms")


def stalls(runs_csv, r):
    """The shard logs' "this shard did not run for N ms" warnings of a run (they sit
    beside its runs.csv): how many, and their seconds in all (the larger shard's)."""
    tag = f"scaling-{r['rate']}-{r['scheme']}-p{r['workers']}"
    worst = (0, 0.0)
    for log in glob.glob(os.path.join(os.path.dirname(runs_csv), f"{tag}.shard*.log")):
        with open(log, errors="replace") as f:
            ms = [int(m.group(1)) for m in STALL.finditer(f.read())]
        if sum(ms) > worst[1] * 1e3:
            worst = (len(ms), sum(ms) / 1e3)
    return worst


def why_rules(r, err, serr, stall, steady):
    """A sentence from the run's own evidence for a cell not within the tolerance.
    The categories are the ones found on 2026-11-26 (bench/sim/README.md)."""
    drops = int(r.get("drops") or 0)
    P = int(r["workers"])
    ca = float(r["cores_avail"]) if r.get("cores_avail") else None
    over = err > 0 or serr > 0
    held = (f"; the shard logs report the loop held up {stall[0]} times, {stall[1]:.1f} s in "
            f"all" if stall[0] else "")
    if not ca:
        return "run before the cores were recorded: simulated on 2 cores"
    if over and r["rate"] == "1gbit" and r["push"] == "dense":
        return (f"links: P = {P} dense flows of 50 MB converge on each shard's tbf queue (20 ms "
                f"of traffic), which dropped {drops} packets in this run; TCP's loss recovery "
                f"leaves the links idle part of the time, the model's fluid links never drop"
                + (f"; and other work left the job {ca:.2f} cores" if ca < 1 else "") + held)
    if over and r["pull"] == "delta" and max(steady.shard_util) >= 0.95:
        return (f"shard CPU: the model's shards are saturated ({max(steady.shard_util):.2f}) at "
                f"shardcap's CPU per message, measured with the shard alone; in the job a delta "
                f"pull's pass shares the caches and memory with {P} workers (+6 to +11% beside "
                f"two memory streams: shard-stalls/contention.csv), the kernel's TCP work and "
                f"the start (8 joins, INIT, first dense pulls) are not in the model; "
                f"{ca:.2f} cores" + held)
    if over:
        return (f"CPU on few cores: other work (load {r.get('load1', '?')}) left the job "
                f"{ca:.2f} cores; with more runnable threads than cores each process's CPU "
                f"per step is more than calibrate.sh and shardcap measured (caches, switches)"
                + held)
    busy = float(r.get("cpu_busy") or 0)
    if busy >= 0.95 and ca < 1:
        return (f"under-predicted on a fully busy machine (cpu_busy {busy:.2f}, load "
                f"{r.get('load1', '?')}): cores_avail ({ca:.2f}) is then the CPU the job used, "
                f"which understates what a job that was not asking for more could have had, "
                f"and the model starves it; the dense pulls' CPU was also calibrated at load 3.5 "
                f"to 11")
    return (f"under-predicted ({ca:.2f} cores available to the job, load "
            f"{r.get('load1', '?')}): the dense pulls' CPU (worker 72-78 ms a step, calibrate.sh; "
            f"shard 9.5 ms a pull and 43 ms a dense push, shardcap) was measured at load 3.5 to "
            f"11 and is less on a quieter machine (calibrate.sh at load 3: 18-51% less a step)")


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def shard_costs(shardcap_dir, n_shard):
    """Costs from bench/shardcap's rows for a shard of n_shard parameters
    (netem-shard-*.csv): the median over the load levels of each CPU figure.
    A delta pull's cost is the cycle's less the push's: the pull phase's own
    figure is a pull with nothing new to send (docs: bench/results/.../shardcap)."""
    med = {}
    for path in sorted(glob.glob(os.path.join(shardcap_dir, "netem-shard-*.csv"))):
        for r in rows(path):
            if r["mode"] != "async" or int(r["params"]) != n_shard:
                continue
            key = (r["encoding"], float(r["density"]))
            med.setdefault(key, []).append(r)

    def m(key, col, fn=None):
        vals = [fn(r) if fn else float(r[col]) for r in med[key]]
        return statistics.median(vals) * 1e-6

    dense = ("dense", 1.0)
    costs = {}
    for d in (0.01, 0.001):
        k = math.ceil(d * n_shard)
        push = m(("topk", d), "cpu_us_per_push")
        delta = m(("topk_delta", d), None,
                  lambda r: float(r["cpu_us_per_cycle"]) - float(r["cpu_us_per_push"]))
        costs[d] = (push / k, delta / n_shard)
    return Costs(
        push_dense_per_param=m(dense, "cpu_us_per_push") / n_shard,
        pull_dense_per_param=m(dense, "cpu_us_per_pull") / n_shard,
        push_sparse_per_entry=0.0,  # per density below
        pull_delta_per_param=0.0,
    ), costs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--netem", action="append",
                    help="bench/netem.sh runs.csv (repeatable; default: DEFAULT_NETEM)")
    ap.add_argument("--shardcap", default=os.path.join(ROOT, "bench/results/2026-11-26/shardcap"))
    ap.add_argument("--worker-cpu",
                    default=os.path.join(ROOT, "bench/results/2026-11-26/sim/worker_cpu.csv"))
    ap.add_argument("--out", default="-")
    ap.add_argument("--tolerance", type=float, default=0.15)
    ap.add_argument("--cpu-per-byte", type=float,
                    help="kernel CPU per byte moved, seconds (default: fitted on --fit)")
    ap.add_argument("--background", type=int, default=2,
                    help="threads of other work for the sensitivity column (default 2)")
    ap.add_argument("--cores", default="measured", choices=["measured", "2"],
                    help="the pool of cores per cell: the run's cores_avail (default) or 2")
    ap.add_argument("--notes", help="CSV source,config,note: a note per cell for `why`")
    ap.add_argument("--fit", default="10gbit/dense/P8",
                    help="the cell (of the first --netem file) whose steady throughput fixes "
                         "cpu_per_byte (default 10gbit/dense/P8)")
    a = ap.parse_args()
    if not 0 < a.tolerance < 1:
        ap.error(f"--tolerance: {a.tolerance} is not in (0, 1)")
    netem = a.netem or [os.path.join(ROOT, f) for f in DEFAULT_NETEM]
    for p in netem + [a.worker_cpu]:
        if not os.path.isfile(p):
            ap.error(f"no such file: {p}")
    wcpu = {r["scheme"]: float(r["cpu_per_step_s"]) for r in rows(a.worker_cpu)}

    def cores(r, how=None):
        how = how or a.cores
        if how == "measured" and r.get("cores_avail"):
            return min(2.0, float(r["cores_avail"]))
        return 2

    notes = {}
    if a.notes:
        for row in rows(a.notes):
            notes[(row["source"], row["config"])] = row["note"]

    def model(r, cpu_per_byte, final_pull, background=0, how=None):
        n, P = int(r["params"]), int(r["workers"])
        n_shard = shard_ranges(n, 2)[0]
        base, per_density = shard_costs(a.shardcap, n_shard)
        push, pull, d = SCHEMES[r["scheme"]]
        costs = Costs(push_dense_per_param=base.push_dense_per_param,
                      pull_dense_per_param=base.pull_dense_per_param)
        if push == "topk":
            costs.push_sparse_per_entry = per_density[d][0]
        if pull == "delta":
            costs.pull_delta_per_param = per_density[d][1]
        job = Job(params=n, workers=P, shards=2, push=push, pull=pull, density=d,
                  compute_s=int(r["compute_ms"]) / 1e3, worker_cpu_s=wcpu[r["scheme"]],
                  steps=int(r["steps"]), final_pull=final_pull)
        cl = Cluster(link_bps=RATES[r["rate"]], link_efficiency=EFFICIENCY,
                     shared_cores=cores(r, how),
                     cpu_per_byte=cpu_per_byte, background_threads=background)
        res = simulate(job, cl, costs)
        return res, job, base, per_density, n_shard

    def cell(r):
        return f"{r['rate']}/{r['scheme']}/P{r['workers']}"

    scaling = [(path, r) for path in netem for r in rows(path)
               if r["experiment"] == "scaling" and r["scheme"] in SCHEMES]
    cpb = a.cpu_per_byte
    fitted = None
    if cpb is None:
        fitted = next((r for path, r in scaling if cell(r) == a.fit and path == netem[0]), None)
        if fitted is None:
            ap.error(f"--fit: no cell {a.fit} in {netem[0]}")
        want = float(fitted["steady_samples_per_s"])
        lo, hi = 0.0, 50e-9
        for _ in range(30):  # throughput falls as cpu_per_byte grows: bisection
            mid = (lo + hi) / 2
            if model(fitted, mid, False)[0].samples_per_s > want:
                lo = mid
            else:
                hi = mid
        cpb = (lo + hi) / 2
    out = sys.stdout if a.out == "-" else open(a.out, "w")
    w = csv.writer(out, lineterminator="\n")
    done_header = False
    for path, r in scaling:
        P = int(r["workers"])
        whole, job, base, per_density, n_shard = model(r, cpb, True)
        steady = model(r, cpb, False)[0]
        loaded = model(r, cpb, False, a.background, "2")[0]
        whole2 = model(r, cpb, True, how="2")[0]
        if not done_header:
            out.write(f"# netem runs: {', '.join(os.path.relpath(p, ROOT) for p in netem)}\n")
            out.write(f"# shard costs (bench/shardcap, {n_shard} parameters, DC-ASGD-a, "
                      f"median over 1-8 sessions): dense push "
                      f"{base.push_dense_per_param * n_shard * 1e3:.1f} ms, dense pull "
                      f"{base.pull_dense_per_param * n_shard * 1e3:.1f} ms; sparse push per "
                      f"entry and delta pull per parameter by density: "
                      + "; ".join(f"{dd}: {v[0] * 1e9:.0f} ns, {v[1] * 1e9:.2f} ns"
                                  for dd, v in sorted(per_density.items())) + "\n")
            out.write("# worker CPU per step (bench/sim/calibrate.sh): "
                      + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in wcpu.items()) + "\n")
            out.write("# machine model: 2 shards + P workers on one pool of cores ("
                      + ("each run's measured cores_avail, 2 where not recorded"
                         if a.cores == "measured" else "2") + f"); links at "
                      f"the rate x {EFFICIENCY}; compute 50 ms sleep; kernel CPU per byte moved "
                      f"{cpb * 1e9:.2f} ns"
                      + (f" (fitted on {a.fit} of {os.path.relpath(netem[0], ROOT)}: that row "
                         f"is not a prediction)" if fitted else " (given)") + "\n")
            out.write(f"# steady_predicted_bg{a.background}: the same model on 2 cores with "
                      f"{a.background} threads of other work always runnable (a sensitivity, "
                      f"not the prediction); predicted_2cores: the whole run on both cores\n")
            out.write("# shard_stalls: the shard logs' 'did not run for N ms' warnings "
                      "(count, seconds in all, the worse shard)\n")
            w.writerow(["config", "source", "measured", "predicted", "error",
                        "steady_measured", "steady_predicted", "steady_error", "within",
                        "cores_avail", "job_cores", "load1", "drops", "shard_stalls",
                        "cpu_busy_measured", "cpu_busy_predicted", "shard_util_predicted",
                        "busiest_link_predicted", "predicted_2cores",
                        f"steady_predicted_bg{a.background}",
                        f"steady_error_bg{a.background}", "why"])
            done_header = True
        meas, smeas = float(r["samples_per_s"]), float(r["steady_samples_per_s"])
        pred = P * job.batch * job.steps / whole.elapsed_s  # to the end of the final pull
        spred = steady.samples_per_s
        err, serr = pred / meas - 1, spred / smeas - 1
        busiest = max(steady.link_util.items(), key=lambda kv: kv[1])
        tag = "fitted" if fitted is r else (
            "yes" if abs(err) <= a.tolerance or abs(serr) <= a.tolerance else "no")
        stall = stalls(path, r)
        src = os.path.relpath(path, ROOT)
        why = ""
        if tag == "no":
            why = notes.get((src, cell(r))) or why_rules(r, err, serr, stall, steady)
        w.writerow([cell(r), src, f"{meas:.1f}", f"{pred:.1f}",
                    f"{err:+.3f}", f"{smeas:.1f}", f"{spred:.1f}", f"{serr:+.3f}", tag,
                    r.get("cores_avail", ""), r.get("job_cores", ""), r.get("load1", ""),
                    r.get("drops", ""), f"{stall[0]}/{stall[1]:.1f}s",
                    r["cpu_busy"], f"{steady.cpu_busy:.2f}", f"{max(steady.shard_util):.2f}",
                    f"{busiest[0]}={busiest[1]:.2f}",
                    f"{P * job.batch * job.steps / whole2.elapsed_s:.1f}",
                    f"{loaded.samples_per_s:.1f}",
                    f"{loaded.samples_per_s / smeas - 1:+.3f}", why])
    if out is not sys.stdout:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
