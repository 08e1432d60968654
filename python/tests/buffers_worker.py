#!/usr/bin/env python3
"""A dcps.torch worker of test_buffers.py: a torchvision ResNet-18 taking 1×28×28
Fashion-MNIST images, trained a few steps on this rank's own examples (so each
rank's BatchNorm statistics differ), then finish(). Writes to OUT.rRANK.pt its
buffers just before finish() ("before"), its state_dict after it ("after"),
and its accuracy on the same 64 test images ("acc")."""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torch"))
sys.path.insert(0, os.path.dirname(__file__))
import dcps.torch as dt  # noqa: E402
from fashion_cnn import read_idx  # noqa: E402
import harness  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--buffers", default="rank0")
    # Odd, with buffer_every = 2: the last step before finish() changes each
    # rank's statistics after the last exchange, so that they differ there.
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, 3, 1, 1, bias=False)
    model.maxpool = torch.nn.Identity()
    w = dt.Worker(model, buffers=a.buffers)
    x = read_idx(harness.TRAIN[0]).reshape(-1, 1, 28, 28)[:512].astype(np.float32) / 255
    y = read_idx(harness.TRAIN[1])[:512].astype(np.int64)
    # Each rank its own examples, of another scale, so that its statistics differ.
    mine = np.arange(w.rank * 256, (w.rank + 1) * 256)
    xs = torch.from_numpy(x[mine] * (1 + w.rank))
    ys = torch.from_numpy(y[mine])
    model.train()
    for s in range(a.steps):
        sel = slice(s * a.batch, (s + 1) * a.batch)
        loss = F.cross_entropy(model(xs[sel]), ys[sel])
        loss.backward()
        w.step(loss)
    before = {k: v.clone() for k, v in model.named_buffers()}
    tx = torch.from_numpy(read_idx(harness.TEST[0]).reshape(-1, 1, 28, 28)[:64]
                          .astype(np.float32) / 255)
    ty = torch.from_numpy(read_idx(harness.TEST[1])[:64].astype(np.int64))

    def evaluate(m):
        m.eval()
        with torch.no_grad():
            return float((m(tx).argmax(1) == ty).float().mean())

    f = w.finish(evaluate=evaluate)
    after = {k: v.clone() for k, v in model.state_dict().items()}
    torch.save({"before": before, "after": after, "acc": float(f["test_acc"])},
               f"{a.out}.r{w.rank}.pt")


if __name__ == "__main__":
    main()
