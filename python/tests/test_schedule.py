#!/usr/bin/env python3
"""The shards' learning-rate schedules (common/schedule.h) against PyTorch.

For each schedule and a few parameter sets, the build tree's tests/schedule_print
prints f(t) and lr * f(t) as the C function computes them, for t = 0 .. N - 1
(the updates a shard applied before the one that uses it). They must equal, to
the last bit, f written here again from the formulas of docs/algorithms.md and
the lr of torch.optim.lr_scheduler.LambdaLR driven by that f, stepped once per
update: LambdaLR's lr is base_lr * f(t), the product the C function forms.

Where one of torch's own schedulers computes the same curve (StepLR and
ExponentialLR for step without warm-up, CosineAnnealingLR for cosine and
LinearLR for linear without warm-up, up to total_steps, LinearLR for the
warm-up of constant, and SequentialLR of the two for a warm-up then cosine), the
C lr must be within REL_TOL of it, relative to the
base lr: those schedulers update the lr recursively (lr_t from lr_{t-1}), so
their rounding errors add up over the steps, where the C function evaluates a
closed form at each t. The largest difference measured is printed.
"""
import math
import os
import subprocess
import sys
import unittest
import warnings

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

N = 400  # updates looked at per schedule: past every total_steps below
# Recursive schedulers against the closed form: a few hundred steps of roundings of
# a double, each about 1e-16 of the lr: measured at most 1.2e-15 (torch 1.13).
REL_TOL = 1e-13


def factor(kind, t, lr, warmup_steps=0, total_steps=0, step_every=1000, step_gamma=0.1,
           min_lr=0.0):
    """f(t) of docs/algorithms.md#schedules, written from the formulas."""
    w = warmup_steps
    if t < w:
        return (t + 1) / w
    u = t - w
    if kind == "constant":
        return 1.0
    if kind == "step":
        return step_gamma ** (u // step_every)
    if kind == "inverse_sqrt":
        return math.sqrt(max(w, 1)) / math.sqrt(t + 1)
    c = min(u, total_steps - w) / (total_steps - w)
    if kind == "cosine":
        return (min_lr + (lr - min_lr) * (1 + math.cos(math.pi * c)) / 2) / lr
    if kind == "linear":
        return (lr + (min_lr - lr) * c) / lr
    raise ValueError(kind)


def c_schedule(kind, lr, n=N, **keys):
    """(f(t), lr * f(t)) for t < n from tests/schedule_print, as doubles."""
    args = [os.path.join(harness.BUILD, "tests", "schedule_print"), str(n),
            f"optimizer.schedule={kind}", f"optimizer.lr={lr!r}"]
    args += [f"optimizer.{k}={v!r}" for k, v in keys.items()]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines()]
    assert [int(r[0]) for r in rows] == list(range(n)), "schedule_print's t column"
    return [float(r[1]) for r in rows], [float(r[2]) for r in rows]


def torch_lrs(lr, make, n=N):
    """The lr each of n updates uses under the scheduler make(optimizer) makes,
    stepped once per update (after optimizer.step(), as torch wants)."""
    import torch
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=lr)
    sched = make(opt)
    lrs = []
    for _ in range(n):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


# (kind, lr, keys): each schedule with and without a warm-up, short and long
# periods, min_lr 0 and not, and a decay that ends before N (t beyond total_steps).
CASES = [
    ("constant", 0.05, {}),
    ("constant", 0.1, {"warmup_steps": 10}),
    ("constant", 0.1, {"warmup_steps": 1}),
    ("step", 0.1, {"step_every": 7, "step_gamma": 0.5}),
    ("step", 0.3, {"warmup_steps": 5, "step_every": 100, "step_gamma": 0.1}),
    ("step", 0.01, {"warmup_steps": 3, "step_every": 1, "step_gamma": 0.97}),
    ("step", 0.01, {"step_every": 50, "step_gamma": 1.0}),
    ("cosine", 1.0, {"total_steps": 100}),
    ("cosine", 0.1, {"warmup_steps": 10, "total_steps": 210, "min_lr": 0.001}),
    ("cosine", 0.003, {"warmup_steps": 50, "total_steps": 51, "min_lr": 3e-5}),
    ("linear", 0.05, {"total_steps": 50}),
    ("linear", 0.1, {"warmup_steps": 20, "total_steps": 320, "min_lr": 0.01}),
    ("linear", 0.1, {"total_steps": 300, "min_lr": 0.1}),
    ("inverse_sqrt", 0.02, {}),
    ("inverse_sqrt", 0.5, {"warmup_steps": 16}),
    ("inverse_sqrt", 0.5, {"warmup_steps": 1}),
]


class LambdaLR(unittest.TestCase):
    def test_every_schedule_is_lambdalr_with_the_same_f_to_the_last_bit(self):
        import torch
        for kind, lr, keys in CASES:
            with self.subTest(kind=kind, lr=lr, **keys):
                f_c, lr_c = c_schedule(kind, lr, **keys)
                f_py = [factor(kind, t, lr, **keys) for t in range(N)]
                self.assertEqual(f_c, f_py, "f(t) differs from the formula written in Python")
                lr_t = torch_lrs(lr, lambda opt: torch.optim.lr_scheduler.LambdaLR(
                    opt, lambda t: factor(kind, t, lr, **keys)))
                self.assertEqual(lr_c, lr_t, "lr * f(t) differs from LambdaLR's")

    def test_the_boundaries_are_where_the_formulas_say(self):
        f, lrs = c_schedule("cosine", 0.1, warmup_steps=10, total_steps=110, min_lr=0.01)
        self.assertEqual(f[0], 0.1)    # the first update: 1/W of lr
        self.assertEqual(f[9], 1.0)    # t = W - 1: the last of the warm-up, W/W
        self.assertEqual(f[10], 1.0)   # t = W: the decay starts at lr itself
        self.assertAlmostEqual(lrs[110], 0.01, delta=1e-17)  # t = T: min_lr
        self.assertEqual(lrs[111:], [lrs[110]] * (N - 111))  # and it stays
        f, _ = c_schedule("inverse_sqrt", 0.1, warmup_steps=4)
        self.assertEqual(f[3], 1.0)
        self.assertEqual(f[15], 0.5)   # sqrt(4) / sqrt(16)

    def test_a_refused_schedule_says_why(self):
        r = subprocess.run([os.path.join(harness.BUILD, "tests", "schedule_print"), "1",
                            "optimizer.schedule=cosine"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("[optimizer] total_steps (0) greater than [optimizer] warmup_steps (0)",
                      r.stderr)


class BuiltinSchedulers(unittest.TestCase):
    """torch's own schedulers, where they draw the same curve."""

    def close(self, name, lr_c, lr_t, lr):
        worst = max(abs(a - b) for a, b in zip(lr_c, lr_t)) / lr
        print(f"  {name}: largest |C - torch| / lr = {worst:.3g} over {len(lr_c)} updates")
        self.assertLessEqual(worst, REL_TOL, name)

    def test_step_is_steplr_and_exponentiallr(self):
        import torch
        sched = torch.optim.lr_scheduler
        _, lr_c = c_schedule("step", 0.1, step_every=7, step_gamma=0.5)
        self.close("StepLR(7, 0.5)", lr_c,
                   torch_lrs(0.1, lambda o: sched.StepLR(o, step_size=7, gamma=0.5)), 0.1)
        _, lr_c = c_schedule("step", 0.01, step_every=1, step_gamma=0.97)
        self.close("ExponentialLR(0.97)", lr_c,
                   torch_lrs(0.01, lambda o: sched.ExponentialLR(o, gamma=0.97)), 0.01)

    def test_cosine_is_cosineannealinglr_up_to_total_steps(self):
        import torch
        sched = torch.optim.lr_scheduler
        for lr, total, min_lr in ((1.0, 100, 0.0), (0.1, 300, 0.001)):
            _, lr_c = c_schedule("cosine", lr, total_steps=total, min_lr=min_lr)
            # CosineAnnealingLR rises again after T_max; the schedule stays at min_lr.
            lr_t = torch_lrs(lr, lambda o: sched.CosineAnnealingLR(o, T_max=total,
                                                                   eta_min=min_lr), total + 1)
            self.close(f"CosineAnnealingLR(T_max={total}, eta_min={min_lr})",
                       lr_c[:total + 1], lr_t, lr)

    def test_linear_is_linearlr(self):
        import torch
        sched = torch.optim.lr_scheduler
        lr, total, min_lr = 0.1, 300, 0.01
        _, lr_c = c_schedule("linear", lr, total_steps=total, min_lr=min_lr)
        lr_t = torch_lrs(lr, lambda o: sched.LinearLR(o, start_factor=1.0,
                                                      end_factor=min_lr / lr,
                                                      total_iters=total))
        self.close(f"LinearLR(1, {min_lr / lr}, {total})", lr_c, lr_t, lr)

    def test_warmup_then_cosine_is_sequentiallr(self):
        import torch
        sched = torch.optim.lr_scheduler
        w, total, min_lr, lr = 25, 300, 0.001, 0.1
        _, lr_c = c_schedule("cosine", lr, warmup_steps=w, total_steps=total, min_lr=min_lr)
        lr_t = torch_lrs(lr, lambda o: sched.SequentialLR(
            o, [sched.LinearLR(o, start_factor=1 / w, end_factor=1.0, total_iters=w - 1),
                sched.CosineAnnealingLR(o, T_max=total - w, eta_min=min_lr)],
            milestones=[w]), total + 1)
        self.close(f"SequentialLR(LinearLR(1/{w}, 1, {w - 1}), CosineAnnealingLR({total - w}, "
                   f"{min_lr}), [{w}])", lr_c[:total + 1], lr_t, lr)

    def test_the_warmup_is_linearlr_from_1_over_w(self):
        import torch
        sched = torch.optim.lr_scheduler
        w = 25
        _, lr_c = c_schedule("constant", 0.1, warmup_steps=w)
        lr_t = torch_lrs(0.1, lambda o: sched.LinearLR(o, start_factor=1 / w, end_factor=1.0,
                                                       total_iters=w - 1))
        self.close(f"LinearLR(1/{w}, 1, {w - 1})", lr_c, lr_t, 0.1)


if __name__ == "__main__":
    warnings.simplefilter("ignore", UserWarning)  # torch's notes on scheduler usage
    harness.main(need_data=False)
