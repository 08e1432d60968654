#!/usr/bin/env python3
"""Time per step of a dcps.torch worker with buckets during backward and
ordered pulls off and on (issue 30, sections 2 and 3; docs/pytorch.md, "Buckets").

One worker, two real shards on 127.0.0.1 (with --netns PFX: shard s in network
namespace PFXs<s> at 10.211.0.<s+1>, as bench/netem.sh makes them, this script
run in PFXw0: bench/netem.sh -x overlap), a job of --mode (default async: with
one worker the same messages and the same work per step as sync) with dense
pushes and pulls (or --push topk at --density with delta pulls) of --values
(fp32, fp16, bf16, int8) and SGD, a model of --model (mlp: --layers square layers of
--width, float32; resnet18: examples/torch/resnet_fashion.py's torchvision ResNet-18 for
1x28x28 images, 11,172,810 parameters, whose front layers are small and compute most),
batch --batch of random data, torch on --threads threads. In each repetition, one
fresh job per configuration, in this order:
  compute   forward and backward alone, no worker (what overlap can hide behind)
  comm      Step.run alone: push and pull of the whole model, no backward
  whole     forward, backward, Worker.step() (today: the step after backward)
  whole_c   forward, backward, then Step.run directly: today's step without
            Worker.step's Python pass over the gradient (torch.isfinite, which
            the buckets do not make: libdcps checks every range it sends)
  buckets   Worker(bucket_mb=B): each bucket pushed during backward
  ordered   Worker(bucket_mb=B, ordered_pull=True): and the pull front first
            while the next forward starts
Each timed over --steps steps after 2 untimed ones. With --device cuda the
model and the batch are on the GPU and every step ends with
torch.cuda.synchronize(): comm, whole and whole_c take the device path
(Step.use_stream), buckets and ordered the staged one (host buffers, a
pushing thread: docs/pytorch.md, "Buckets"). With --pin, the thread that
computes runs on CPU 0 and everything else (the shards, libdcps's and ZeroMQ's
threads, so mostly the kernel's network work too) on CPU 1, as on a node whose
other cores and the shards' machines do that work (on a 2-core machine the
shards, the links and the worker otherwise share the cores that compute; on
this project's VM the 2 vCPUs are not independent, and work on CPU 1 still
slows CPU 0: bench/results/2026-11-26/overlap-netem/pinned/). Prints one CSV row per
configuration and repetition: rep,config,steps,ms_per_step,ratio_to_whole,
ratio_to_max (ms_per_step over max(compute, comm) of the same repetition),load1 (the
machine's 1-minute load average when the configuration ended),forward_ms,backward_ms,
step_ms (a step's mean time in the forward pass, in backward and in the worker's step
call: with ordered pulls the forward includes the waits for parameters still coming,
with buckets the backward includes the pushes; all steps, the untimed too).
DCPS_BUILDDIR names the build tree (dcps-server), PYTHONPATH its python/ folder.
"""
import argparse
import os
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "python", "tests"))
import torch  # noqa: E402

import dcps.torch as dt  # noqa: E402
import harness  # noqa: E402


def model_of(args):
    torch.manual_seed(0)
    if args.model == "resnet18":
        examples = os.path.join(here, "..", "examples", "torch")
        if examples not in sys.path:  # model_of runs once a configuration
            sys.path.insert(0, examples)
        from resnet_fashion import resnet18_fashion
        return resnet18_fashion().to(args.device)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).to(args.device)


def batch_of(args):
    g = torch.Generator().manual_seed(1)
    shape = (args.batch, 1, 28, 28) if args.model == "resnet18" else (args.batch, args.width)
    return torch.randn(*shape, generator=g).to(args.device)


def synced(args):
    """--device cuda: waits for the device's queued work (each step ends so,
    as a script that reads its loss does)."""
    if args.device == "cuda":
        torch.cuda.synchronize()


def pin(args):
    """--pin: this thread (the one that computes) on CPU 0, the process's
    other threads on CPU 1; threads made later inherit from their maker."""
    if not args.pin:
        return
    me = threading.get_native_id()
    for tid in map(int, os.listdir("/proc/self/task")):
        os.sched_setaffinity(tid, {0} if tid == me else {1})


def timed(args, one):
    for _ in range(2):
        one()
    pin(args)  # the untimed steps started every thread the step uses
    t0 = time.perf_counter()
    for _ in range(args.steps):
        one()
    return (time.perf_counter() - t0) / args.steps * 1e3


def compute_alone(args):
    m, x = model_of(args), batch_of(args)

    def one():
        m.zero_grad(set_to_none=False)
        m(x).square().mean().backward()
        synced(args)

    return timed(args, one)


def with_worker(args, config):
    comp = {"values": args.values}
    if args.push == "topk":
        comp.update(push="topk", density=args.density, pull="delta")
    servers, netns = {}, None
    if args.netns:
        servers = {"shards": ", ".join(f"tcp://10.211.0.{s + 1}:17000" for s in range(2))}
        netns = [f"{args.netns}s{s}" for s in range(2)]
    job = harness.Job(harness.job_text(
        shards=2, workers=1, job={"mode": args.mode}, model={"layers": None, "params": "auto"},
        optimizer={"kind": "sgd", "lr": 1e-6}, compression=comp, servers=servers,
        worker={"log_every": 1000000000, "timeout_ms": 60000},
        server={"dead_after_ms": 120000}), shards=2, netns=netns,
        cpus="1" if args.pin else None)
    try:
        m, x = model_of(args), batch_of(args)
        kw = {}
        if config in ("buckets", "ordered"):
            kw["bucket_mb"] = args.bucket_mb
        if config == "ordered":
            kw["ordered_pull"] = True
        w = dt.Worker(m, job=job.path, rank=0, overrides=[job.shards], **kw)

        phase = [0.0, 0.0, 0.0]  # forward, backward, the step's call: seconds

        def one():
            t0 = time.perf_counter()
            if config != "comm":
                loss = m(x).square().mean()
                t1 = time.perf_counter()
                loss.backward()
            else:
                t1 = t0
            t2 = time.perf_counter()
            if config in ("comm", "whole_c"):
                w._step.run(w._g_arg, w._p_arg, 1)
                w._grad.zero_()
            else:
                w.step()
            synced(args)
            t3 = time.perf_counter()
            for i, d in enumerate((t1 - t0, t2 - t1, t3 - t2)):
                phase[i] += d

        ms = timed(args, one)
        w.close()
        # the timed steps' share: timed() runs 2 untimed steps first
        total = args.steps + 2
        return ms, [v / total * 1e3 for v in phase]
    finally:
        job.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=("mlp", "resnet18"), default="mlp")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bucket-mb", type=float, default=4.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mode", choices=("async", "sync", "ssp"), default="async")
    ap.add_argument("--values", choices=("fp32", "fp16", "bf16", "int8"), default="fp32")
    ap.add_argument("--push", choices=("dense", "topk"), default="dense")
    ap.add_argument("--density", type=float, default=0.01)
    ap.add_argument("--netns", metavar="PFX", help="shards in bench/netem.sh's namespaces")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="the model and the batch on the GPU")
    ap.add_argument("--pin", action="store_true",
                    help="compute on CPU 0, the shards and the worker's other threads on CPU 1")
    args = ap.parse_args()
    if args.pin and not {0, 1} <= os.sched_getaffinity(0):
        ap.error(f"--pin needs CPUs 0 and 1; this process may use {sorted(os.sched_getaffinity(0))}")
    torch.set_num_threads(args.threads)
    n = sum(p.numel() for p in model_of(args).parameters())
    print(f"# {args.model}, {n} parameters ({n * 4 / 2**20:.1f} MiB), batch {args.batch}, "
          f"bucket_mb {args.bucket_mb}, torch threads {args.threads}, mode {args.mode}, push {args.push}"
          f"{f' {args.density}' if args.push == 'topk' else ''}, values {args.values}, shards "
          f"{'in ' + args.netns + 's0/s1' if args.netns else 'on 127.0.0.1'}"
          f"{', compute on CPU 0, the rest on CPU 1' if args.pin else ''}, device "
          f"{torch.cuda.get_device_name(0) if args.device == 'cuda' else 'cpu'}, torch "
          f"{torch.__version__}",
          flush=True)
    print("rep,config,steps,ms_per_step,ratio_to_whole,ratio_to_max,load1,forward_ms,"
          "backward_ms,step_ms", flush=True)
    for rep in range(1, args.reps + 1):
        ms = {"compute": compute_alone(args)}
        phases = {"compute": ("", "", "")}
        load = {"compute": os.getloadavg()[0]}
        for config in ("comm", "whole", "whole_c", "buckets", "ordered"):
            ms[config], ph = with_worker(args, config)
            phases[config] = tuple(f"{v:.1f}" for v in ph)
            load[config] = os.getloadavg()[0]
        top = max(ms["compute"], ms["comm"])
        for config, v in ms.items():
            print(f"{rep},{config},{args.steps},{v:.1f},{v / ms['whole']:.3f},{v / top:.3f},"
                  f"{load[config]:.2f},{','.join(phases[config])}", flush=True)


if __name__ == "__main__":
    main()
