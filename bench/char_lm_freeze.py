#!/usr/bin/env python3
"""Top-k with error feedback into AdamW after a dense warm-up, with AdamW's second moment
frozen at the warm-up's end (as 1-bit Adam does, Tang et al. 2021) or not: what that does
to examples/torch/char_lm.py's AdamW job, in one process, no staleness, exact pulls.

    bench/char_lm_freeze.py DENSE_STEPS STEPS DENSITY freeze|plain

For the first DENSE_STEPS updates the whole gradient is applied by AdamW (written out here
on flat vectors, with the job's settings, schedule and no-decay mask: the same numbers as
torch.optim.AdamW, see the reference's held-out lines). After them each gradient is added
to a residual and the DENSITY entries of largest magnitude are taken out and applied as a
sparse gradient (zeros elsewhere: the non-lazy rule). `freeze`: v no longer moves after
DENSE_STEPS (its bias correction stays that of DENSE_STEPS), so the update is linear in
the gradient and a Top-k entry carrying the sum of many steps' gradients moves its
parameter as far as those steps would have; `plain`: v goes on moving. Prints held-out
bits per character every 100 updates and after STEPS.
"""
import math
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
    if len(sys.argv) != 5 or sys.argv[4] not in ("freeze", "plain"):
        raise SystemExit(__doc__.split("\n\n")[1])
    N, STOP, DENS, MODE = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    torch.set_num_threads(1)
    torch.manual_seed(1)
    text, held_text, _ = char_lm.load_corpus(char_lm.CORPUS)
    train, held = char_lm.windows(text, 64), char_lm.windows(held_text, 64)
    cfg = char_lm.job_settings(JOB)
    f = char_lm.lr_factor(cfg)
    model = char_lm.CharTransformer()
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    decay = {id(p) for p in char_lm.decay_groups(model)[0]["params"]}
    mask = torch.cat([torch.full((p.numel(),), float(id(p) in decay)) for p in params])
    w = torch.cat([p.detach().reshape(-1) for p in params]).clone()
    m, v, res = torch.zeros(n), torch.zeros(n), torch.zeros(n)
    b1, b2, eps, wd = cfg["beta1"], cfg["beta2"], cfg["eps"], cfg["weight_decay"]
    k = math.ceil(DENS * n)

    def load():
        at = 0
        for p in params:
            p.data.copy_(w[at:at + p.numel()].view_as(p))
            at += p.numel()

    gen = torch.Generator().manual_seed(cfg["seed"])
    batches = [o[a:a + 32] for _ in range(2) for o in [torch.randperm(len(train), generator=gen)]
               for a in range(0, len(o), 32)]
    t0 = time.monotonic()
    for t, idx in enumerate(batches):
        load()
        model.zero_grad(set_to_none=True)
        char_lm.loss_of(model, train[idx]).backward()
        g = torch.cat([p.grad.reshape(-1) for p in params])
        if t >= N:
            res += g
            sel = res.abs().topk(k).indices
            g = torch.zeros(n)
            g[sel] = res[sel]
            res[sel] = 0
        lr, s = cfg["lr"] * f(t), t + 1
        m.mul_(b1).add_((1 - b1) * g)
        if t < N or MODE == "plain":
            v.mul_(b2).add_((1 - b2) * g * g)
        vhat = v / (1 - b2 ** min(s, N if MODE == "freeze" and t >= N else s))
        w.mul_(1 - lr * wd * mask)
        w.sub_(lr * (m / (1 - b1 ** s)) / (vhat.sqrt() + eps))
        if (t + 1) % 100 == 0 or t + 1 == STOP:
            load()
            r = char_lm.evaluate(model, held)
            print(f"N={N} dens={DENS} {MODE} step={t + 1} bpc={r[0] / char_lm.LN2:.4f} "
                  f"{time.monotonic() - t0:.0f}s", flush=True)
        if t + 1 >= STOP:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
