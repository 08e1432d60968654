#!/usr/bin/env python3
"""The shards' update rules against torch.optim (issue 27): for each rule and
option, and for each lr schedule (against LambdaLR with the same f), a sync job with one worker and dense pushes trains a small CNN on
Fashion-MNIST for 50 steps through dcps.torch, and a plain torch loop trains a
copy of it with torch.optim.<Rule>(foreach=False) on the same batches, in the
same process (python/tests/optim_worker.py).

With torch's scalar kernels (ATEN_CPU_CAPABILITY=default: no AVX, no FMA)
torch does each rule's float operations one by one, in the order its Python
code gives, as the shards' C does (server/optimizer.c): the two runs are
bit-identical after every one of the 50 steps. With the kernels torch picks
on this machine (AVX2), torch fuses a·b + c into one FMA where the C rounds
a·b first, so the two differ by float32 rounding; the bounds are below."""
import json
import os
import platform
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "optim_worker.py")
STEPS = 50
U = 2.0 ** -24  # float32's unit roundoff: half an ulp of 1

# name, the job's [optimizer] keys, the torch.optim class and its arguments.
# Learning rates that move the model well within 50 steps; Adagrad's is
# torch's default, 0.01: its first step moves every parameter by ±lr whatever
# the gradient's size, and at 0.05 this model's trajectory is chaotic (torch
# against itself, AVX2 against scalar kernels, ends 0.15 apart).
CASES = [
    ("sgd", {"kind": "sgd", "lr": 0.1}, "SGD", {"lr": 0.1}),
    ("sgd weight_decay", {"kind": "sgd", "lr": 0.1, "weight_decay": 0.01},
     "SGD", {"lr": 0.1, "weight_decay": 0.01}),
    ("momentum", {"kind": "momentum", "lr": 0.05, "momentum": 0.9},
     "SGD", {"lr": 0.05, "momentum": 0.9}),
    ("momentum nesterov", {"kind": "momentum", "lr": 0.05, "momentum": 0.9, "nesterov": "true"},
     "SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
    ("momentum weight_decay",
     {"kind": "momentum", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01},
     "SGD", {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}),
    ("momentum nesterov weight_decay",
     {"kind": "momentum", "lr": 0.05, "momentum": 0.8, "nesterov": "true",
      "weight_decay": 0.001},
     "SGD", {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.001}),
    ("adam", {"kind": "adam", "lr": 0.001}, "Adam", {"lr": 0.001}),
    ("adam weight_decay", {"kind": "adam", "lr": 0.001, "weight_decay": 0.01},
     "Adam", {"lr": 0.001, "weight_decay": 0.01}),
    ("adamw", {"kind": "adamw", "lr": 0.001}, "AdamW", {"lr": 0.001}),
    ("adamw wd 0.1 betas eps",
     {"kind": "adamw", "lr": 0.002, "weight_decay": 0.1, "beta1": 0.8, "beta2": 0.99,
      "eps": 1e-6},
     "AdamW", {"lr": 0.002, "weight_decay": 0.1, "betas": (0.8, 0.99), "eps": 1e-6}),
    ("adagrad", {"kind": "adagrad", "lr": 0.01}, "Adagrad", {"lr": 0.01}),
    ("adagrad weight_decay", {"kind": "adagrad", "lr": 0.01, "weight_decay": 0.01},
     "Adagrad", {"lr": 0.01, "weight_decay": 0.01}),
    ("adagrad eps", {"kind": "adagrad", "lr": 0.01, "eps": 1e-3},
     "Adagrad", {"lr": 0.01, "eps": 1e-3}),
    # [optimizer] schedule against torch.optim.lr_scheduler.LambdaLR with the same
    # f (test_schedule.py's), stepped once per update: the lr of update t is lr·f(t).
    ("adamw warmup cosine", {"kind": "adamw", "lr": 0.003}, "AdamW", {"lr": 0.003},
     {"schedule": "cosine", "warmup_steps": 10, "total_steps": 40, "min_lr": 0.0003}),
    ("momentum step", {"kind": "momentum", "lr": 0.05, "momentum": 0.9}, "SGD",
     {"lr": 0.05, "momentum": 0.9}, {"schedule": "step", "step_every": 15, "step_gamma": 0.5}),
    ("adam linear", {"kind": "adam", "lr": 0.002}, "Adam", {"lr": 0.002},
     {"schedule": "linear", "warmup_steps": 5, "total_steps": 45, "min_lr": 0.0002}),
    ("sgd inverse_sqrt", {"kind": "sgd", "lr": 0.2}, "SGD", {"lr": 0.2},
     {"schedule": "inverse_sqrt", "warmup_steps": 8}),
]


def run_cases(capability):
    """Runs every case in one optim_worker process with torch's kernels of
    `capability` ("default", or None: torch's choice); the lines it printed."""
    jobs, cases = [], []
    try:
        for name, keys, optim, kwargs, *sched in CASES:
            sched = sched[0] if sched else {}
            text = harness.job_text(
                shards=2, workers=1, job={"mode": "sync"},
                model={"layers": None, "params": "auto"}, optimizer={**keys, **sched},
                # importing torch may take seconds on a loaded machine
                server={"heartbeat_ms": 200, "dead_after_ms": 30000})
            job = harness.Job(text, shards=2)
            jobs.append(job)
            cases.append({"name": name, "job": job.path, "set": job.shards, "optim": optim,
                          "kwargs": kwargs, "steps": STEPS, "schedule": sched})
        path = os.path.join(jobs[0].dir, "cases.json")
        with open(path, "w") as f:
            json.dump(cases, f)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env.pop("DCPS_SET", None)
        env.pop("ATEN_CPU_CAPABILITY", None)
        if capability:
            env["ATEN_CPU_CAPABILITY"] = capability
        p = subprocess.run([sys.executable, WORKER, path], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=600)
        if p.returncode != 0:
            raise AssertionError(f"optim_worker.py exited {p.returncode}: {p.stderr[-4000:]}")
        out = [json.loads(line) for line in p.stdout.splitlines()]
        if [r["name"] for r in out] != [c[0] for c in CASES]:
            raise AssertionError(f"optim_worker.py answered {len(out)} cases: {p.stdout}")
        return out
    finally:
        for job in jobs:
            job.close()


def table(title, rows):
    """Prints each case's measurements: the difference after 50 steps, absolute
    and relative to the largest parameter, the largest one-update difference
    (relative) and how far training moved the model."""
    print(f"\n{title}; torch's kernels: {rows[0]['capability']}", file=sys.stderr)
    print(f"{'case':32s} {'max|Δ| 50 steps':>16s} {'relative':>10s} {'one step (rel)':>14s} "
          f"{'moved':>8s}", file=sys.stderr)
    for r in rows:
        print(f"{r['name']:32s} {r['max_abs']:16.3g} {r['max_rel']:10.3g} "
              f"{r['forced_rel']:14.3g} {r['moved']:8.3g}", file=sys.stderr)


# Training moves every case's model by more than this (Adam about lr = 0.001
# a step): over 3,000 times the largest bound below.
MOVED = 0.02


class RulesEqualTorchOptim(unittest.TestCase):
    @unittest.skipUnless(platform.machine() in ("x86_64", "AMD64"),
                         "torch's scalar kernels fuse no multiply-add on x86-64 only")
    def test_scalar_kernels_every_rule_is_bit_identical_to_torch_optim_for_50_steps(self):
        """Bound: 0. Both sides do the same float32 operations in the same
        order, with constants (1 − β, the step size lr/(1 − β1^t), √(1 − β2^t),
        1 − lr·wd) computed in double and rounded once, as torch computes
        them from Python floats: so every step's parameters are the same bits.
        (On x86-64, torch's default kernels are built for the baseline, which
        has no FMA instruction; elsewhere the compiler may fuse a·b + c.)"""
        rows = run_cases("default")
        table("ATEN_CPU_CAPABILITY=default; bound: 0", rows)
        self.assertEqual(rows[0]["capability"], "NO AVX", "torch did not take the scalar "
                         "kernels that ATEN_CPU_CAPABILITY=default asks for")
        for r in rows:
            self.assertGreater(r["moved"], MOVED, f"{r['name']}: training did not move the model")
            self.assertEqual(r["max_abs"], 0.0, f"{r['name']}: differs by {r['max_abs']} "
                             f"after {STEPS} steps; after each step: {r['diffs']}")
            self.assertEqual(r["equal_steps"], list(range(1, STEPS + 1)), r["name"])

    def test_native_kernels_every_rule_equals_torch_optim_to_float32_rounding(self):
        """torch's vectorised kernels (AVX2, AVX-512) fuse w + (−lr)·d,
        m·β1 + (1 − β1)·g and the like into one FMA (one rounding) where the
        shards round the product first (two), so one update may differ by
        about one rounding at the largest parameter's scale S: U·S, with
        U = 2^-24, and by less again through the state, whose own roundings
        change the update by a relative U·1/(1 − β) of a step much smaller
        than S. Bounds:
        - one update from the same parameters and gradient (forced): 4·U·S;
        - 50 steps each on its own: 2·U·S per step, added up, 100·U·S. The
          model is smooth (tanh and average pools): a difference of one
          rounding changes the next gradient by about as much and does not
          jump, as it would where a ReLU switches or a max-pool's argmax
          moves (with ReLU and max-pool, momentum with weight decay went
          from 1.5e-8 to 2.7e-6 in one step, and ended 1.5e-4 apart), and
          the learning rates leave the runs far from chaos (see CASES on
          Adagrad)."""
        rows = run_cases(None)
        table(f"bounds: one step 4·U·S = {4 * U:.3g}·S, 50 steps {2 * STEPS} U·S = "
              f"{2 * STEPS * U:.3g}·S", rows)
        for r in rows:
            self.assertGreater(r["moved"], MOVED, f"{r['name']}: training did not move the model")
            self.assertLessEqual(r["forced_rel"], 4 * U, f"{r['name']}: one update differs by "
                                 f"{r['forced_rel'] / U:.2f} U relative to the largest parameter")
            self.assertLessEqual(r["max_rel"], 2 * STEPS * U,
                                 f"{r['name']}: {STEPS} steps differ by {r['max_abs']} "
                                 f"({r['max_rel'] / U:.1f} U·S); after each step: {r['diffs']}")


if __name__ == "__main__":
    harness.main()
