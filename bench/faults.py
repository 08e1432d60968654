"""bench/faults.py — many faults at random moments (issue 29's long run).

Draws N runs of python/tests/test_faults.py's job, made longer (2 shards, 3
workers of the built-in MLP, 4 epochs over 12,000 examples: 500 steps a worker,
with the lr decaying to a tenth along a cosine over the job's updates, so that
its end is near a plateau and runs differ little) from every mode (async, sync, ssp) and
fault (a worker stopped, or killed and started again; a shard stopped, or
killed and started again from its checkpoint, also with delta pulls; every
process killed at once and started again), each at a moment and for a time
drawn at random (the moment 1 to 8 s after the start, in a job of about 12 s),
and undisturbed twins of each mode and pull (three of async and ssp, whose runs
differ by the order pushes meet in: their mean).

A run ends "apart" when its shards end at different versions (or, in sync, with
different rounds' digests) after a fault that kills no shard, after killing
everything in sync (checkpoints at the same rounds: a consistent cut) or async
and ssp (exactly once: every step of every rank applied once on each shard), or
after killing one shard in sync (every shard goes back to the checkpoint all of
them hold, and the workers with them). A shard killed alone in async or ssp
loses the updates since its checkpoint (it ends lower: counted as lost updates,
not apart). Writes OUT/runs.csv (one
row a run), OUT/summary.txt (hangs, runs whose shards ended apart, runs more
than 1 point of test accuracy off their twin) and prints the summary.

With --buckets the workers are dcps.torch's (python/tests/mlp_worker.py) with
buckets pushed during backward and ordered pulls: async and sync, a worker
stopped or killed and started again, a shard stopped, or (since 2026-11-27, when
buckets took sync jobs with checkpoints) a shard killed and started again.

usage: python3 bench/faults.py N OUT [FIRST_SEED] [--buckets]   (DCPS_BUILDDIR: the build)
"""
import csv
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python",
                                "tests"))
import test_faults as T  # noqa: E402

MODES = ("async", "sync", "ssp")
FAULTS = ("stop_worker", "kill_worker", "stop_shard", "kill_shard", "kill_all")
BUCKET_FAULTS = ("stop_worker", "kill_worker", "stop_shard", "kill_shard")
LIMIT, EPOCHS = 12000, 4


def schedule(mode):
    """SGD at 0.1 decaying to 0.01 along a cosine over the shards' updates: a
    step of each of the 3 workers in async and ssp, one a round in sync."""
    steps = EPOCHS * LIMIT // 3 // 32 * (1 if mode == "sync" else 3)
    return {"schedule": "cosine", "total_steps": steps, "min_lr": 0.01}


def main():
    args = [a for a in sys.argv[1:] if a != "--buckets"]
    buckets = len(args) < len(sys.argv) - 1
    n, out = int(args[0]), args[1]
    first = int(args[2]) if len(args) > 2 else 1
    modes, faults = (("async", "sync"), BUCKET_FAULTS) if buckets else (MODES, FAULTS)
    os.makedirs(out, exist_ok=True)
    rng = random.Random(first)
    twins = {}
    for mode in modes:
        for pull in ("dense",) if buckets else ("dense", "delta"):
            accs = []
            for k in range(1 if mode == "sync" else 3):
                r = T.run_fault(mode, "none", k, pull=pull, limit=LIMIT, epochs=EPOCHS,
                                optimizer=schedule(mode), buckets=buckets)
                accs.append(float(r["accuracy"][0]))
            twins[mode, pull] = sum(accs) / len(accs)
            print(f"twin {mode} {pull}: {accs}", flush=True)
    rows, hangs, apart, off = [], 0, 0, 0
    for i in range(n):
        mode, fault = rng.choice(modes), rng.choice(faults)
        # (Buckets' twins are of dense pulls only: their jobs pull dense.)
        delta = fault == "kill_shard" and rng.random() < 0.5 and not buckets
        pull = "delta" if delta else "dense"
        r = T.run_fault(mode, fault, first + i, pull=pull, limit=LIMIT, epochs=EPOCHS,
                        earliest=1.0 + 2 * buckets, latest=8.0, optimizer=schedule(mode),
                        buckets=buckets)
        (v0, d0), (v1, d1) = r["shards"]
        accs = [float(a) for a in r["accuracy"] if a is not None]
        twin = twins[mode, pull]
        worst = max((abs(a - twin) for a in accs), default=float("nan"))
        # A shard killed alone in async or ssp loses the updates after its
        # checkpoint (the other keeps its own); in sync every shard goes back to
        # the checkpoint both hold, so they must end together (docs/algorithms.md).
        alone = fault == "kill_shard" and mode != "sync"
        lost = abs((v0 or 0) - (v1 or 0)) if alone else 0
        split = not alone and (v0 != v1 or (mode == "sync" and d0 != d1))
        hangs += not r["finished"]
        apart += split
        off += not (worst <= 0.01)
        rows.append({"run": i, "mode": mode, "fault": fault, "pull": pull, "seed": r["seed"],
                     "at_s": r["at_s"], "hold_s": r["hold_s"],
                     "target": r.get("rank", r.get("shard", "")),
                     "finished": int(r["finished"]), "codes": " ".join(map(str, r["codes"])),
                     "versions": f"{v0} {v1}", "lost_updates": lost, "rounds": f"{d0} {d1}" if mode == "sync" else "",
                     "accuracy": " ".join(r["accuracy"][k] or "-" for k in range(3)),
                     "twin": twin, "worst_off": round(worst, 4), "late": int(bool(r.get("late")))})
        print(f"{i}: {mode} {fault} {pull} at {r['at_s']} s for {r['hold_s']} s: "
              f"finished {r['finished']} versions {v0} {v1} rounds {d0} {d1} "
              f"accuracy {r['accuracy']} (twin {twin})", flush=True)
        for tag, err in r["errors"].items():
            print(f"  {tag}: {err.strip().splitlines()[-1] if err.strip() else ''}", flush=True)
    with open(os.path.join(out, "runs.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lost = [row["lost_updates"] for row in rows
            if row["fault"] == "kill_shard" and row["mode"] != "sync"]
    summary = (f"{n} runs with a fault: {hangs} did not finish, {apart} ended with the shards "
               f"apart (versions, or sync rounds' digests), {off} more than 1 point of test "
               f"accuracy off their undisturbed twin; {len(lost)} shards killed alone in async "
               f"or ssp lost {sum(lost)} updates in all (at most {max(lost, default=0)} in one "
               f"run)\n"
               f"twins: " + ", ".join(f"{m} {p} {a}" for (m, p), a in twins.items()) + "\n")
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(summary)
    print(summary, end="")
    return 1 if hangs or apart else 0


if __name__ == "__main__":
    sys.exit(main())
