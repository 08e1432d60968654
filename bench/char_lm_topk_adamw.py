#!/usr/bin/env python3
"""Top-k with error feedback into AdamW, in one process: what compression alone does to
examples/torch/char_lm.py's AdamW job, before any shard runs it.

    bench/char_lm_topk_adamw.py [--job JOB] [--steps N] [--lr LR] [--weight-decay WD]
                                [--density D] [--pull-density D] [--lazy]

One worker, no staleness. Each update: the gradient of a batch is added to the residual,
the `density` entries of largest magnitude are taken out of it (Top-k with error
feedback, as libdcps's step) and handed to the rule as a sparse gradient:

  - default: torch.optim.AdamW with the job's settings, schedule (LambdaLR, char_lm.py's
    f(t)) and no-decay groups, given the sparse gradient as a dense one with zeros
    elsewhere: the non-lazy form, which decays the moments and moves every entry at
    every update;
  - --lazy: the same AdamW at the pushed entries only (moments, decoupled weight decay and
    step), as torch.optim.SparseAdam does, with Adam's step count t of all updates.

The worker's copy then follows the rule's parameters through a delta pull (the
`pull_density` entries of largest |w - mirror| are sent and added to the mirror, which is
the worker's copy) or, with --pull-density 1, exactly. With --density 1 --pull-density 1
this is char_lm.py --reference: the same held-out numbers. Prints char_lm.py's heldout:
lines at its evaluation points up to --steps, and one at the end with the rule's own
parameters (after an exact pull).
"""
import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "torch"))
import char_lm  # noqa: E402


def flat(params):
    return torch.cat([p.detach().reshape(-1) for p in params])


def assign(params, values):
    at = 0
    for p in params:
        k = p.numel()
        p.data.copy_(values[at:at + k].view_as(p))
        at += k


class LazyAdamW:
    """AdamW at the given entries of a flat vector only (SparseAdam's rule, with
    torch.optim.AdamW's decoupled weight decay where decay_mask is 1)."""

    def __init__(self, w, cfg, decay_mask):
        self.w, self.cfg, self.mask = w, cfg, decay_mask
        self.m, self.v = torch.zeros_like(w), torch.zeros_like(w)
        self.t = 0

    def step(self, idx, g, lr):
        c, self.t = self.cfg, self.t + 1
        b1, b2 = c["beta1"], c["beta2"]
        self.m[idx] = b1 * self.m[idx] + (1 - b1) * g
        self.v[idx] = b2 * self.v[idx] + (1 - b2) * g * g
        self.w[idx] *= 1 - lr * c["weight_decay"] * self.mask[idx]
        m_hat = self.m[idx] / (1 - b1 ** self.t)
        v_hat = self.v[idx] / (1 - b2 ** self.t)
        self.w[idx] -= lr * m_hat / (v_hat.sqrt() + c["eps"])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", default=os.path.join(here, "..", "examples", "torch", "char_lm.ini"))
    ap.add_argument("--steps", type=int, default=0, help="stop after N updates (0: the job's)")
    ap.add_argument("--lr", type=float, help="the job's lr replaced (min_lr scaled with it)")
    ap.add_argument("--weight-decay", type=float, help="the job's weight_decay replaced")
    ap.add_argument("--density", type=float, default=0.01, help="Top-k density of the push")
    ap.add_argument("--pull-density", type=float, default=0.01,
                    help="delta pull density (1: exact pulls)")
    ap.add_argument("--lazy", action="store_true", help="lazy AdamW (pushed entries only)")
    ap.add_argument("--seed", type=int, default=1, help="torch seed of the initial model")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    text, held_text, _ = char_lm.load_corpus(char_lm.CORPUS)
    train, held = char_lm.windows(text, 64), char_lm.windows(held_text, 64)
    cfg = char_lm.job_settings(args.job)
    if cfg["kind"] != "adamw":
        raise SystemExit(f"{args.job}: [optimizer] kind is {cfg['kind']}, not adamw")
    if args.lr is not None:
        cfg["min_lr"] *= args.lr / cfg["lr"]
        cfg["lr"] = args.lr
    if args.weight_decay is not None:
        cfg["weight_decay"] = args.weight_decay
    factor = char_lm.lr_factor(cfg)

    model = char_lm.CharTransformer()  # the worker's copy
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    rule_model = char_lm.CharTransformer()  # the rule's parameters
    rule_model.load_state_dict(model.state_dict())
    rule_params = list(rule_model.parameters())
    if args.lazy:
        decay = {id(p) for p in char_lm.decay_groups(rule_model)[0]["params"]}
        mask = torch.cat([torch.full((p.numel(),), float(id(p) in decay)) for p in rule_params])
        lazy = LazyAdamW(flat(rule_params), cfg, mask)
    else:
        opt = char_lm.torch_optimizer(cfg, char_lm.decay_groups(rule_model))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    residual = torch.zeros(n)
    k, k_pull = math.ceil(args.density * n), math.ceil(args.pull_density * n)
    mirror = flat(params)

    b = cfg["batch_size"]
    total = -(-len(train) // b) * cfg["epochs"]
    stop = min(args.steps or total, total)
    at_eval = char_lm.eval_steps(total, 8)
    label = (f"topk density={args.density} pull_density={args.pull_density} "
             f"{'lazy' if args.lazy else 'nonlazy'} lr={cfg['lr']} wd={cfg['weight_decay']}")
    gen = torch.Generator().manual_seed(cfg["seed"])
    t0, step = time.monotonic(), 0
    while step < stop:
        order = torch.randperm(len(train), generator=gen)
        for at in range(0, len(order), b):
            model.zero_grad(set_to_none=True)
            char_lm.loss_of(model, train[order[at:at + b]]).backward()
            residual += torch.cat([p.grad.reshape(-1) for p in params])
            idx = residual.abs().topk(k).indices
            g = residual[idx].clone()
            residual[idx] = 0
            if args.lazy:
                lazy.step(idx, g, cfg["lr"] * factor(step))
                w = lazy.w
            else:
                sparse = torch.zeros(n)
                sparse[idx] = g
                for p, view in zip(rule_params, sparse.split([p.numel() for p in rule_params])):
                    p.grad = view.view_as(p).clone()
                opt.step()
                sched.step()
                w = flat(rule_params)
            if k_pull >= n:
                mirror = w.clone()
            else:
                d = w - mirror
                sent = d.abs().topk(k_pull).indices
                mirror[sent] += d[sent]
            assign(params, mirror)
            step += 1
            if step >= stop:
                break
            if step in at_eval:
                char_lm.report(label, step, step * b, char_lm.evaluate(model, held), t0)
    assign(params, lazy.w if args.lazy else flat(rule_params))
    char_lm.report(label + " exact", step, step * b, char_lm.evaluate(model, held), t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
