#!/usr/bin/env python3
"""The baseline of bench/torch.sh: examples/torch/fashion_cnn.py's CNN trained with
torch.nn.parallel.DistributedDataParallel over gloo, one process per rank, plain
SGD (DDP averages the gradients of the P ranks: synchronous SGD on P batches).

    ddp_cnn.py --world P --rank R --port PORT [--addr RANK0_ADDR] [--epochs E] [--lr LR]
               [--batch B] [--warmup-steps N] [--hook none|fp16|powersgd]
               [--powersgd-rank R] [--powersgd-start STEPS] [--model cnn|wide]
               [--train-limit N] [--test-limit N] [--alone]

What DDP needs to be at its best against a larger global batch (32 P): --lr is the lr
of the averaged gradient, so the linear scaling rule (Goyal et al. 2017, "Accurate, large
minibatch SGD") is --lr 0.1*P; --warmup-steps N ramps it linearly over the first N
updates (update t, counted from 0, uses lr (t+1)/N, the ramp their Section 2.2 uses to
keep the first steps of a scaled lr stable). --hook picks DDP's communication hook
(torch.distributed.algorithms.ddp_comm_hooks): none is the default all-reduce of fp32
buckets, fp16 is default_hooks.fp16_compress_hook (half the bytes), powersgd is
powerSGD_hook (Vogels et al. 2019) with error feedback and warm start, rank
--powersgd-rank (default 1), plain all-reduce before update --powersgd-start (default
234: the 10% of a 5-epoch run at P = 4 that torch's PowerSGDState documentation
suggests to start from; it must be at least 2 and at least --warmup-steps); with powersgd
DDP keeps the whole gradient in one bucket, because on torch 1.13 over gloo the hook's
chained allreduces of several buckets reach the ranks in different orders and gloo aborts
(so PowerSGD's few bytes are not overlapped with backward).

--alone measures compute alone: no process group, no DDP, no communication; each rank
trains its own copy of the model on its batches with the same SGD (the step's forward,
backward and update, with P ranks sharing the machine as in the real runs).

--model, --train-limit and --test-limit are fashion_cnn.py's: the model (cnn, the default,
or wide) and the first N training and test examples (0: all).

Rank r takes the same share of each epoch as a dcps.torch worker (dcps.share,
seed 42), so both systems see the same batches. After every epoch each rank
prints 'rank=R epoch=E done: test_loss= test_acc= elapsed_s=' (elapsed since the
process group formed, or with --alone the model was made; evaluation included, as
fashion_cnn.py counts it).
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
from fashion_cnn import DATA, MODELS, evaluate, limited, load  # noqa: E402


def check(ap, args):
    """Refuses, through ap.error (exit 2 with the usage), what would run but not be what
    was asked: a world or rank out of range, a port no TCP store can take, a batch, lr or
    epoch count that trains nothing, a negative warm-up, a hook with --alone, and
    PowerSGD settings the hook refuses or that would compress during the warm-up."""
    if args.world < 1:
        ap.error(f"--world must be at least 1, not {args.world}")
    if not 0 <= args.rank < args.world:
        ap.error(f"--rank must be in [0, {args.world - 1}] for --world {args.world}, "
                 f"not {args.rank}")
    if not 1 <= args.port <= 65535:
        ap.error(f"--port must be in [1, 65535], not {args.port}")
    if args.epochs < 1:
        ap.error(f"--epochs must be at least 1, not {args.epochs}")
    if args.batch < 1:
        ap.error(f"--batch must be at least 1, not {args.batch}")
    if not (args.lr > 0 and args.lr != float("inf")):
        ap.error(f"--lr must be a positive finite number, not {args.lr}")
    if args.warmup_steps < 0:
        ap.error(f"--warmup-steps must be 0 (none) or more, not {args.warmup_steps}")
    if args.alone and args.hook != "none":
        ap.error(f"--alone communicates nothing: --hook {args.hook} has nothing to hook")
    if args.hook == "powersgd":
        if args.powersgd_rank < 1:
            ap.error(f"--powersgd-rank must be at least 1, not {args.powersgd_rank}")
        # PowerSGDState with error feedback or warm start refuses a start under 2: DDP
        # rebuilds its buckets at update 1, which would invalidate memorised tensors.
        if args.powersgd_start < 2:
            ap.error(f"--powersgd-start must be at least 2, not {args.powersgd_start}")
        if args.powersgd_start < args.warmup_steps:
            ap.error(f"--powersgd-start ({args.powersgd_start}) must not be under "
                     f"--warmup-steps ({args.warmup_steps}): torch's PowerSGD guidance is "
                     "to compress only after the warm-up")


def hook(model, args):
    """Registers the communication hook args.hook asks for on the DDP model."""
    if args.hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
        state = ps.PowerSGDState(process_group=None,
                                 matrix_approximation_rank=args.powersgd_rank,
                                 start_powerSGD_iter=args.powersgd_start,
                                 use_error_feedback=True, warm_start=True)
        model.register_comm_hook(state, ps.powerSGD_hook)


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
    ap.add_argument("--warmup-steps", type=int, default=0)
    ap.add_argument("--hook", choices=("none", "fp16", "powersgd"), default="none")
    ap.add_argument("--powersgd-rank", type=int, default=1)
    ap.add_argument("--powersgd-start", type=int, default=234)
    ap.add_argument("--model", choices=sorted(MODELS), default="cnn")
    ap.add_argument("--train-limit", type=int, default=0)
    ap.add_argument("--test-limit", type=int, default=0)
    ap.add_argument("--alone", action="store_true",
                    help="compute alone: no process group and no communication")
    args = ap.parse_args()
    check(ap, args)
    torch.set_num_threads(1)
    torch.manual_seed(1)
    train = limited(load(DATA, "train"), args.train_limit, "train")
    test = limited(load(DATA, "t10k"), args.test_limit, "test")
    if args.alone:
        model = MODELS[args.model]()
        train_loop(args, model, model, train, test)
        return 0
    dist.init_process_group("gloo", init_method=f"tcp://{args.addr}:{args.port}",
                            world_size=args.world, rank=args.rank)
    if args.hook == "powersgd":
        # One bucket: torch 1.13's powerSGD_hook chains each bucket's allreduces
        # through futures, and with several buckets gloo receives them in a
        # different order on different ranks (it aborts: "op.preamble.length <=
        # op.nbytes"); DDP makes a first bucket of 1 MiB whatever bucket_cap_mb says.
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 40
    model = torch.nn.parallel.DistributedDataParallel(
        MODELS[args.model](), bucket_cap_mb=1 << 20 if args.hook == "powersgd" else 25)
    hook(model, args)
    train_loop(args, model, model.module, train, test)
    dist.destroy_process_group()
    return 0


def train_loop(args, model, plain, train, test):
    """Trains model (DDP's, or with --alone the plain one) with SGD on rank
    args.rank's batches, evaluating plain after each epoch."""
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
            if steps < args.warmup_steps:
                opt.param_groups[0]["lr"] = args.lr * (steps + 1) / args.warmup_steps
            elif steps == args.warmup_steps:
                opt.param_groups[0]["lr"] = args.lr
            opt.zero_grad()
            F.cross_entropy(model(x_all[sel]), y_all[sel]).backward()
            opt.step()
            steps += 1
        loss, acc = evaluate(plain, test)
        print(f"rank={args.rank} epoch={epoch} done: test_loss={loss:.4f} test_acc={acc:.4f} "
              f"elapsed_s={time.monotonic() - t0:.2f} steps={steps}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
