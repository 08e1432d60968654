#!/usr/bin/env python3
"""The baseline of bench/torch.sh: examples/torch/fashion_cnn.py's CNN trained with
torch.nn.parallel.DistributedDataParallel over gloo, one process per rank, plain
SGD (DDP averages the gradients of the P ranks: synchronous SGD on P batches).

    ddp_cnn.py --world P --rank R --port PORT [--addr RANK0_ADDR] [--epochs E] [--lr LR]
               [--batch B]

Rank r takes the same share of each epoch as a dcps.torch worker (dcps.share,
seed 42), so both systems see the same batches. After every epoch each rank
prints 'rank=R epoch=E done: test_loss= test_acc= elapsed_s=' (elapsed since the
process group formed, evaluation included, as fashion_cnn.py counts it).
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "torch"))
import dcps  # noqa: E402
from fashion_cnn import DATA, FashionCNN, evaluate, load  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--addr", default="127.0.0.1", help="rank 0's address (the rendezvous)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    train, test = load(DATA, "train"), load(DATA, "t10k")
    dist.init_process_group("gloo", init_method=f"tcp://{args.addr}:{args.port}",
                            world_size=args.world, rank=args.rank)
    model = torch.nn.parallel.DistributedDataParallel(FashionCNN())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    t0 = time.monotonic()
    order = np.empty(len(train), dtype=np.uint32)
    x_all, y_all = train.tensors
    steps = 0
    for epoch in range(1, args.epochs + 1):
        k = dcps.share(args.seed, epoch, args.rank, args.world, order)
        idx = torch.from_numpy(order[:k].astype(np.int64))
        # Every rank must run the same number of steps: the shortest share's.
        n_steps = (len(train) // args.world) // args.batch
        for s in range(n_steps):
            sel = idx[s * args.batch:(s + 1) * args.batch]
            opt.zero_grad()
            F.cross_entropy(model(x_all[sel]), y_all[sel]).backward()
            opt.step()
            steps += 1
        loss, acc = evaluate(model.module, test)
        print(f"rank={args.rank} epoch={epoch} done: test_loss={loss:.4f} test_acc={acc:.4f} "
              f"elapsed_s={time.monotonic() - t0:.2f} steps={steps}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
