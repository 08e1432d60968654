#!/usr/bin/env python3
"""One process, three copies of a small CNN on the same batches: one trained
through dcps shards (dcps.torch, the only worker of a sync job with dense
pushes), two by plain torch loops with torch.optim's single-tensor path
(foreach=False). Used by test_optim.py.

    optim_worker.py CASES.json

CASES.json is a list of {"name", "job", "set", "optim", "kwargs", "steps",
"schedule"}: the job file, the "servers.shards=..." override naming its running
shards, a torch.optim class name and its arguments, and the job's [optimizer]
schedule keys (empty: none), which the torch loops follow with LambdaLR and
test_schedule.py's f, stepped once per update. For each case one JSON line goes to
stdout:

- free: the torch loop on its own for `steps` steps. max_abs and max_rel
  (relative to its largest parameter, scale) compare the two models at the
  end, diffs after each step; equal_steps lists the steps after which the
  two were bit-identical; moved is how far training moved the model.
- forced: before each step, the torch copy's parameters are set to the
  shard's, so both apply one update to the same parameters and gradient;
  forced_rel is the largest difference that one update makes, over all
  steps, relative to the largest parameter. The gradients are then always
  the same bits, and only the rules' arithmetic can differ: a difference
  in one step cannot grow through the model over the next ones.

Every copy's parameters are views of one flat buffer, laid out as
dcps.torch.Worker lays out its own, and every gradient is computed in this
process, so copies with the same parameters get the same gradient bits.
"""
import copy
import io
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torch"))
import dcps.torch as dt  # noqa: E402
from fashion_cnn import read_idx  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import test_schedule  # noqa: E402  (f of the schedules, written from the formulas)

DATA = "/usr/share/datasets/fashion-mnist"
BATCH = 32


def model_new():
    """A small CNN with biases everywhere: conv 1→4 (5×5), tanh, 2×2 average
    pool, linear 576→32, tanh, linear 32→10: 18,898 parameters. Smooth
    (tanh and averages, not ReLU and max-pool): a difference of one rounding
    in a parameter changes the next gradient by about as much, never by a
    jump where a unit switches off or a pool's maximum moves to another pixel."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 5), nn.Tanh(), nn.AvgPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 12 * 12, 32), nn.Tanh(), nn.Linear(32, 10))


def flatten(model):
    """Makes every parameter a view of one contiguous buffer, as
    dcps.torch.Worker does; returns the buffer."""
    params = list(model.parameters())
    flat = torch.empty(sum(p.numel() for p in params), dtype=torch.float32)
    at = 0
    with torch.no_grad():
        for p in params:
            k = p.numel()
            flat[at:at + k].copy_(p.detach().reshape(-1))
            p.data = flat[at:at + k].view_as(p)
            at += k
    return flat


def params(model):
    """A copy of the model's parameters as one flat tensor."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def batches(steps):
    """The first steps × 32 training images of Fashion-MNIST in a seeded order."""
    images = read_idx(f"{DATA}/train-images-idx3-ubyte.gz")
    labels = read_idx(f"{DATA}/train-labels-idx1-ubyte.gz")
    order = np.random.default_rng(27).permutation(steps * BATCH)
    x = torch.from_numpy(images[order].astype(np.float32) / np.float32(255)).unsqueeze(1)
    y = torch.from_numpy(labels[order].astype(np.int64))
    return [(x[i:i + BATCH], y[i:i + BATCH]) for i in range(0, steps * BATCH, BATCH)]


def run(case, data):
    """Trains the three copies of one case; its line (above) as a dict."""
    steps = case["steps"]
    ours = model_new()
    free, forced = copy.deepcopy(ours), copy.deepcopy(ours)
    free_flat, forced_flat = flatten(free), flatten(forced)
    start = free_flat.clone()
    optim = getattr(torch.optim, case["optim"])
    opt_free = optim(free.parameters(), foreach=False, **case["kwargs"])
    opt_forced = optim(forced.parameters(), foreach=False, **case["kwargs"])
    scheds = []
    if case.get("schedule"):
        keys = dict(case["schedule"])
        kind, lr = keys.pop("schedule"), case["kwargs"]["lr"]
        scheds = [torch.optim.lr_scheduler.LambdaLR(
            opt, lambda t: test_schedule.factor(kind, t, lr, **keys))
            for opt in (opt_free, opt_forced)]
    worker = dt.Worker(ours, job=case["job"], rank=0, overrides=[case["set"]])
    diffs, equal, forced_rel = [], [], 0.0
    for t, (x, y) in enumerate(data[:steps]):
        before = params(ours)
        loss = F.cross_entropy(ours(x), y)
        loss.backward()
        worker.step(loss)
        for model, opt in ((free, opt_free), (forced, opt_forced)):
            if model is forced:
                with torch.no_grad():
                    forced_flat.copy_(before)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            opt.step()
        for sched in scheds:
            sched.step()
        ours_flat = params(ours)
        diffs.append((ours_flat - free_flat).abs().max().item())
        if torch.equal(ours_flat, free_flat):
            equal.append(t + 1)
        forced_rel = max(forced_rel, (ours_flat - forced_flat).abs().max().item()
                         / ours_flat.abs().max().item())
    worker.finish(out=io.StringIO())  # exact pull: what the shards hold
    ours_flat = params(ours)
    scale = free_flat.abs().max().item()
    max_abs = (ours_flat - free_flat).abs().max().item()
    return {"name": case["name"], "max_abs": max_abs, "max_rel": max_abs / scale,
            "scale": scale, "moved": (free_flat - start).abs().max().item(),
            "diffs": diffs, "equal_steps": equal, "forced_rel": forced_rel,
            "n": free_flat.numel(), "capability": capability()}


def capability():
    """The kernels torch runs here, as torch.__config__.show() says ("AVX2",
    "NO AVX", ...)."""
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            return line.split(":", 1)[1].strip()
    return "unknown"


def main():
    torch.set_num_threads(1)
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    data = batches(max(c["steps"] for c in cases))
    for case in cases:
        print(json.dumps(run(case, data)), flush=True)


if __name__ == "__main__":
    main()
