#!/usr/bin/env python3
"""A small CNN on Fashion-MNIST, trained through dcps shards with dcps.torch.

Run it as every worker of a job, for example 2 shards and 2 workers on this host:

    deploy/launch-local.sh examples/torch/fashion_cnn.ini -- python3 examples/torch/fashion_cnn.py

(deploy/quickstart.sh torch-demo does exactly that). The job file says how to
train: workers, consistency model, update rule, compression, batch size and
epochs. The data are the IDX files of Debian's dataset-fashion-mnist, read with
numpy, pixels scaled to [0, 1] as dcps-worker does.
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An IDX file (MNIST format, gzipped or not) as a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 8:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    body = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
    if body.size != int(np.prod(shape)):
        raise ValueError(f"{path}: {body.size} bytes of data for shape {shape}")
    return body.reshape(shape)


def load(directory, part):
    """Fashion-MNIST's 'train' or 't10k' part as a TensorDataset (N, 1, 28, 28)."""
    images = read_idx(os.path.join(directory, f"{part}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(directory, f"{part}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / np.float32(255)).unsqueeze(1)
    return torch.utils.data.TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))


class FashionCNN(nn.Module):
    """Two 5x5 convolutions (16 and 32 channels, each ReLU and 2x2 max-pool),
    then two linear layers: about 215,000 parameters."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class FashionWide(FashionCNN):
    """FashionCNN's convolutions under a wide head (1568-2048-2048-10): about
    7.4 million parameters, 30 MiB of gradient a step for about the compute of
    FashionCNN twice, so that on an ordinary link a step is mostly
    communication (bench/netem.sh -x torch with --model wide, issue 30)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32 * 7 * 7, 2048)
        self.fc2 = nn.Linear(2048, 2048)
        self.fc3 = nn.Linear(2048, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


MODELS = {"cnn": FashionCNN, "wide": FashionWide}


def limited(data, limit, what):
    """The first `limit` examples of a TensorDataset (0: all of them)."""
    if limit < 0 or limit > len(data):
        raise SystemExit(f"--{what}-limit {limit}: 0 (all) to {len(data)} examples")
    return data if limit == 0 else torch.utils.data.TensorDataset(*(t[:limit] for t in
                                                                     data.tensors))


def evaluate(model, test):
    """(mean cross-entropy, accuracy) on the whole test set."""
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for at in range(0, len(test), 1000):
            x, y = test[at:at + 1000]
            out = model(x)
            loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
    model.train()
    return loss / len(test), correct / len(test)


def main():
    import dcps.torch as dt  # here, so that the data and model helpers import without dcps

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DATA, help="folder of the IDX files (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=1, help="torch seed of rank 0's initial model")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    ap.add_argument("--model", choices=sorted(MODELS), default="cnn",
                    help="cnn (default, 215,000 parameters) or wide (7.4 million)")
    ap.add_argument("--train-limit", type=int, default=0, metavar="N",
                    help="train on the first N training examples (default 0: all 60,000)")
    ap.add_argument("--test-limit", type=int, default=0, metavar="N",
                    help="evaluate on the first N test examples (default 0: all 10,000)")
    ap.add_argument("--bucket-mb", type=float, default=0, metavar="MB",
                    help="push the gradient in buckets of about MB MiB during backward "
                         "(dcps.torch.Worker's bucket_mb; default 0: after backward, whole)")
    ap.add_argument("--ordered-pull", action="store_true",
                    help="with --bucket-mb, pull front layers first while the next forward "
                         "starts (Worker's ordered_pull)")
    ap.add_argument("--comm-only", action="store_true",
                    help="measure communication alone: no forward or backward pass, each "
                         "step pushes a zero gradient and pulls (bench/netem.sh's +comm)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    train = limited(load(args.data, "train"), args.train_limit, "train")
    test = limited(load(args.data, "t10k"), args.test_limit, "test")
    model = MODELS[args.model]()
    # job from DCPS_JOB, rank from DCPS_RANK
    worker = dt.Worker(model, bucket_mb=args.bucket_mb or None, ordered_pull=args.ordered_pull)
    t0 = time.monotonic()
    epoch = worker.epoch
    for x, y in dt.shard(train):
        if worker.epoch != epoch:  # report the epoch just finished
            worker.wait()
            loss, acc = evaluate(model, test)
            print(f"rank={worker.rank} epoch={epoch} done: test_loss={loss:.4f} "
                  f"test_acc={acc:.4f} elapsed_s={time.monotonic() - t0:.2f}", flush=True)
            epoch = worker.epoch
        if args.comm_only:  # the gradient stays zero: the step's messages, no compute
            worker.step()
            continue
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        worker.step(loss)
    worker.finish(evaluate=lambda m: evaluate(m, test))
    return 0


if __name__ == "__main__":
    sys.exit(main())
