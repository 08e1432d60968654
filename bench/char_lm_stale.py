#!/usr/bin/env python3
"""Staleness alone, in one process: examples/torch/char_lm.py's AdamW job (its settings,
schedule, no-decay groups, batches of 32 in the reference's order) where every gradient
is computed on the parameters of `staleness` updates before the one it is applied to, as
with two asynchronous workers that each push once between the other's pull and push.

    bench/char_lm_stale.py STALENESS STEPS [unused] [LR] [BETA1]

Dense pushes and exact pulls, no shard: torch.optim.AdamW applies each gradient. With
STALENESS 0 this is char_lm.py --reference (the same held-out numbers). LR replaces the
job's lr (min_lr scaled with it), BETA1 its beta1. Prints the held-out bits per character
every 100 updates and after STEPS.
"""
import collections
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "torch"))
import char_lm  # noqa: E402

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "torch",
                   "char_lm.ini")


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    S, STOP = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    torch.manual_seed(1)
    text, held_text, _ = char_lm.load_corpus(char_lm.CORPUS)
    train, held = char_lm.windows(text, 64), char_lm.windows(held_text, 64)
    cfg = char_lm.job_settings(JOB)
    LR = float(sys.argv[4]) if len(sys.argv) > 4 else cfg["lr"]
    cfg["min_lr"] *= LR / cfg["lr"]
    cfg["lr"] = LR
    if len(sys.argv) > 5:
        cfg["beta1"] = float(sys.argv[5])
    model = char_lm.CharTransformer()  # the worker's copy, S updates old
    rule = char_lm.CharTransformer()  # the parameters the rule updates
    rule.load_state_dict(model.state_dict())
    opt = char_lm.torch_optimizer(cfg, char_lm.decay_groups(rule))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, char_lm.lr_factor(cfg))
    hist = collections.deque([{k: v.clone() for k, v in rule.state_dict().items()}],
                             maxlen=S + 1)
    gen = torch.Generator().manual_seed(cfg["seed"])
    b, step, t0 = 32, 0, time.monotonic()
    batches = [o[at:at + b] for _ in range(2) for o in [torch.randperm(len(train), generator=gen)]
               for at in range(0, len(o), b)]
    for idx in batches:
        model.load_state_dict(hist[0])
        model.zero_grad(set_to_none=True)
        char_lm.loss_of(model, train[idx]).backward()
        for p, q in zip(rule.parameters(), model.parameters()):
            p.grad = q.grad.clone()
        opt.step()
        sched.step()
        step += 1
        hist.append({k: v.clone() for k, v in rule.state_dict().items()})
        if step % 100 == 0 or step == STOP:
            r = char_lm.evaluate(rule, held)
            print(f"S={S} lr={LR} b1={cfg['beta1']} step={step} bpc={r[0] / char_lm.LN2:.4f} "
                  f"{time.monotonic() - t0:.0f}s", flush=True)
        if step >= STOP:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
