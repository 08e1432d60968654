#!/usr/bin/env python3
"""dcps bench/topk_torch.py: torch.topk on CUDA over the grid of bench/topk.

For N in {2^20, 2^24, 2^27} and density in {0.001, 0.01, 0.1}, k = ceil(density N),
on normal random float32 data on the GPU: the median time of torch.topk(x.abs(), k),
timed like bench/topk's GPU rows (wall clock per call, ending with a
synchronisation). Note that torch.topk returns the k values sorted by magnitude,
with no particular order among ties, while dcps_topk_gpu returns them sorted by
index with ties going to the lower index: the same work, not the same contract.

Prints the GPU on a '#' line, then CSV rows: torch_cuda,n,density,k,median_ms.

usage: python3 bench/topk_torch.py [largest N]   (default 134217728 = 2^27)
"""
import math
import statistics
import sys
import time

import torch

LOG2_NS = (20, 24, 27)
DENSITIES = (0.001, 0.01, 0.1)


def median_ms(fn, reps):
    fn()  # untimed: allocator and kernel warm-up
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main():
    largest = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 27
    if not torch.cuda.is_available():
        sys.exit("no CUDA device")
    torch.manual_seed(1)
    x_all = torch.randn(max(1 << s for s in LOG2_NS if 1 << s <= largest), device="cuda")
    print(f"# GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print("device,n,density,k,median_ms")
    for log2_n in LOG2_NS:
        n = 1 << log2_n
        if n > largest:
            break
        x = x_all[:n]
        for density in DENSITIES:
            k = math.ceil(density * n)
            t = median_ms(lambda: torch.topk(x.abs(), k), 31)
            print(f"torch_cuda,{n},{density:g},{k},{t:.3f}", flush=True)


if __name__ == "__main__":
    main()
