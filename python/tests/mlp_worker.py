#!/usr/bin/env python3
"""dcps-worker's built-in MLP, trained through dcps.torch: the same layers, the
same initial parameters (rank 0: tests/mlp_init with the job's seed), the
same data order (dcps.torch.shard is dcps-worker's share) and the same pixels
(IDX bytes / 255). Used by the tests to show one step implementation.

    mlp_worker.py --layers 784,256,128,10 --images F --labels F [--limit N]
                  [--test-images F --test-labels F] [--params-out FILE]
                  [--bucket-mb MB [--ordered-pull]] [--delay-ms MS]

Job and rank come from DCPS_JOB and DCPS_RANK (deploy/launch-local.sh sets them).
--params-out writes the final parameters (float32, raw) for comparison.
--bucket-mb and --ordered-pull are dcps.torch.Worker's bucket_mb and ordered_pull;
--delay-ms sleeps that long between each forward and backward pass (as
dcps-worker's [worker] delay_ms, a slower model's compute).
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torch"))
import dcps.torch as dt  # noqa: E402
from fashion_cnn import read_idx  # noqa: E402

BUILD = os.environ.get("DCPS_BUILDDIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))


def mlp_init(layers, seed):
    """dcps-worker's initial parameters of the MLP `layers` (a list of ints)
    for `seed`, from the build tree's tests/mlp_init (the MLP is the
    trainer's: the extension does not carry it)."""
    out = subprocess.run([os.path.join(BUILD, "tests", "mlp_init"),
                          ",".join(str(v) for v in layers), str(seed)],
                         check=True, stdout=subprocess.PIPE).stdout
    return np.frombuffer(out, dtype="<f4").astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", required=True)
    ap.add_argument("--seed", type=int, default=42, help="the job's [job] seed")
    ap.add_argument("--images", required=True)
    ap.add_argument("--labels", required=True)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--test-images")
    ap.add_argument("--test-labels")
    ap.add_argument("--params-out")
    ap.add_argument("--bucket-mb", type=float, default=0)
    ap.add_argument("--ordered-pull", action="store_true")
    ap.add_argument("--delay-ms", type=float, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    layers = [int(v) for v in args.layers.split(",")]
    mods = []
    for i in range(1, len(layers)):
        mods.append(nn.Linear(layers[i - 1], layers[i]))
        if i < len(layers) - 1:
            mods.append(nn.ReLU())
    model = nn.Sequential(*mods)
    # dcps-worker's initial parameters: its layout is torch's (W out x in, then b).
    flat = mlp_init(layers, args.seed)
    assert flat.size == sum(p.numel() for p in model.parameters()), "tests/mlp_init's size"
    with torch.no_grad():
        at = 0
        for p in model.parameters():
            p.copy_(torch.from_numpy(flat[at:at + p.numel()]).view_as(p))
            at += p.numel()

    def dataset(images, labels, limit=0):
        x = read_idx(images).reshape(-1, layers[0])
        y = read_idx(labels)
        if limit:
            x, y = x[:limit], y[:limit]
        x = torch.from_numpy(x.astype(np.float32) / np.float32(255))
        return torch.utils.data.TensorDataset(x, torch.from_numpy(y.astype(np.int64)))

    train = dataset(args.images, args.labels, args.limit)
    worker = dt.Worker(model, bucket_mb=args.bucket_mb or None, ordered_pull=args.ordered_pull)
    for x, y in dt.shard(train):
        loss = F.cross_entropy(model(x), y)
        if args.delay_ms:
            time.sleep(args.delay_ms / 1000)
        loss.backward()
        worker.step(loss)

    def evaluate(m):
        if not args.test_images:
            return None
        test = dataset(args.test_images, args.test_labels)
        with torch.no_grad():
            out = m(test.tensors[0])
            return (F.cross_entropy(out, test.tensors[1]).item(),
                    (out.argmax(1) == test.tensors[1]).float().mean().item())

    worker.finish(evaluate=evaluate if args.test_images else None)
    if args.params_out:
        params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        params.numpy().tofile(args.params_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
