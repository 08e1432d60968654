#!/usr/bin/env python3
"""A torchvision ResNet-18 on Fashion-MNIST, trained through dcps shards with
dcps.torch: BatchNorm buffers, a DataLoader with worker processes, bfloat16
autocast on the CPU, a resume after the workers died, and a saved state dict.

Run it as every worker of a job, for example 2 shards and 2 workers on this host:

    deploy/launch-local.sh examples/torch/resnet_fashion.ini -- \\
        python3 examples/torch/resnet_fashion.py --train-limit 4096 --out run/resnet

bench/resnet_fashion.sh runs it, kills both workers with SIGKILL mid-run, restarts
them, and checks the saved model without dcps (--check).

The model is torchvision.models.resnet18(num_classes=10) with conv1 replaced by a
3x3 stride-1 convolution of 1 input channel and the max-pool removed (28x28 images:
feature maps 28, 14, 7, 4). The data are the IDX files of Debian's
dataset-fashion-mnist (read as fashion_cnn.py reads them), pixels in [0, 1].
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_cnn import DATA, load  # noqa: E402  (Fashion-MNIST as a TensorDataset; no dcps)


def resnet18_fashion():
    """torchvision's ResNet-18 for 1x28x28 images: 3x3 stride-1 conv1, no max-pool."""
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


def evaluate(model, test, bf16=True, batch=500):
    """(mean cross-entropy, accuracy) on test, in eval mode (BatchNorm's running
    statistics), under the same autocast as training."""
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for at in range(0, len(test), batch):
            x, y = test[at:at + batch]
            out = model(x).float()
            loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
    model.train()
    return loss / len(test), correct / len(test)


def subset(ds, limit):
    if limit and limit < len(ds):
        return torch.utils.data.Subset(ds, range(limit))
    return ds


def tensors(ds):
    """A TensorDataset (or the first N of one) as one TensorDataset, for slicing."""
    if isinstance(ds, torch.utils.data.Subset):
        x, y = ds.dataset.tensors
        return torch.utils.data.TensorDataset(x[:len(ds)], y[:len(ds)])
    return ds


def check(args):
    """Loads OUT/model.pt into a fresh model, without dcps, and evaluates it."""
    test = tensors(subset(load(args.data, "t10k"), args.test_limit))
    model = resnet18_fashion()
    model.load_state_dict(torch.load(os.path.join(args.out, "model.pt")))
    loss, acc = evaluate(model, test, bf16=not args.fp32)
    print(f"check: fresh torchvision resnet18, no dcps: test_loss={loss:.6f} test_acc={acc:.6f}",
          flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DATA, help="folder of the IDX files (default: %(default)s)")
    ap.add_argument("--train-limit", type=int, default=0,
                    help="train on the first N training images only (default: all 60,000)")
    ap.add_argument("--test-limit", type=int, default=0,
                    help="evaluate on the first N test images only (default: all 10,000)")
    ap.add_argument("--fp32", action="store_true", help="no bfloat16 autocast")
    ap.add_argument("--loader-workers", type=int, default=2, help="DataLoader num_workers")
    ap.add_argument("--seed", type=int, default=1, help="torch seed of rank 0's initial model")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    ap.add_argument("--out", default="run/resnet", help="rank 0 writes OUT/model.pt")
    ap.add_argument("--check", action="store_true",
                    help="no training: load OUT/model.pt into a fresh model and evaluate it")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.check:
        return check(args)
    import dcps.torch as dt

    train = subset(load(args.data, "train"), args.train_limit)
    test = tensors(subset(load(args.data, "t10k"), args.test_limit))
    model = resnet18_fashion()
    worker = dt.Worker(model, param_groups=dt.decay_groups(model), buffers="rank0")
    if worker.resumed:
        print(f"rank={worker.rank} resumed: the shards hold {worker.resumed} steps of this rank",
              flush=True)
    sampler = dt.sampler(train)
    loader = torch.utils.data.DataLoader(train, batch_size=worker.batch_size, sampler=sampler,
                                         num_workers=args.loader_workers)
    t0 = time.monotonic()
    for epoch in range(1, worker.epochs + 1):
        sampler.set_epoch(epoch)
        n = 0
        for x, y in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not args.fp32):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            worker.step(loss)
            n += 1
        print(f"rank={worker.rank} epoch={epoch} batches={n} elapsed_s={time.monotonic() - t0:.1f}",
              flush=True)
    worker.finish(evaluate=lambda m: evaluate(m, test, bf16=not args.fp32))
    if worker.rank == 0:
        os.makedirs(args.out, exist_ok=True)
        # After finish() the model holds the shards' final parameters (finish()'s exact
        # pull) and the job's buffers. worker.state_dict() would say the same, but with
        # this build it raises StateError ("this worker is closed") after finish(),
        # although docs/pytorch.md shows it there; model.state_dict() gives copies that
        # own their storage (dcps.torch's hook), so the file holds only the model.
        torch.save(model.state_dict(), os.path.join(args.out, "model.pt"))
        print(f"rank=0 saved {os.path.join(args.out, 'model.pt')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
