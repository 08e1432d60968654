#!/usr/bin/env python3
"""Measures what test_torch.CudaModel asserts, without asserting: a CUDA model
and the same model on the CPU, the same hand-set gradients, each the one worker
of its own job (two shards each). Per step it prints the largest |cpu - gpu|
parameter difference, how many parameters differ, and both workers' bytes
pushed and pulled; then the same after the final pull. Several [compression]
settings, so that a difference can be placed (Top-k and error feedback, the
delta pull, the dense steps), and a larger model (multi-block Top-k).

    DCPS_BUILDDIR=... DCPS_SRCDIR=... diag_cuda.py"""
import copy
import io
import os
import sys
import time

sys.path.insert(0, os.path.join(os.environ["DCPS_SRCDIR"], "python", "tests"))
import harness  # noqa: E402

VARIANTS = [
    # name, [compression], model widths (in, hidden, out), steps
    ("test", {"push": "topk", "density": 0.05, "pull": "delta", "warmup_steps": 1,
              "correction_every": 4}, (40, 300, 10), 10),
    ("dense", {"push": "dense", "pull": "dense"}, (40, 300, 10), 6),
    ("topk-densepull", {"push": "topk", "density": 0.05, "pull": "dense"}, (40, 300, 10), 6),
    ("topk-delta-1.2M", {"push": "topk", "density": 0.01, "pull": "delta", "warmup_steps": 1,
                         "correction_every": 4}, (784, 1536, 10), 8),
]


def compare(cpu, gpu):
    import torch

    worst, ndiff = 0.0, 0
    for pc, pg in zip(cpu.parameters(), gpu.parameters()):
        a, b = pc.detach(), pg.detach().cpu()
        ne = a.view(torch.int32) != b.view(torch.int32)  # bits, not values
        ndiff += int(ne.sum())
        worst = max(worst, float((a - b).abs().max()))
    return worst, ndiff


def run(name, comp, widths, steps):
    import torch

    import dcps.torch as dt

    text = harness.job_text(workers=1, model={"layers": None, "params": "auto"},
                            compression=comp)
    jobs = [harness.Job(text, shards=2), harness.Job(text, shards=2)]
    same = True
    try:
        torch.manual_seed(0)
        cpu = torch.nn.Sequential(torch.nn.Linear(widths[0], widths[1]), torch.nn.ReLU(),
                                  torch.nn.Linear(widths[1], widths[2]))
        gpu = copy.deepcopy(cpu).cuda()
        n = sum(p.numel() for p in cpu.parameters())
        wc = dt.Worker(cpu, job=jobs[0].path, rank=0, overrides=[jobs[0].shards])
        wg = dt.Worker(gpu, job=jobs[1].path, rank=0, overrides=[jobs[1].shards])
        print(f"[{name}] n={n} compression={comp}", flush=True)
        tc = tg = 0.0
        for t in range(steps):
            gen = torch.Generator().manual_seed(t)
            for pc, pg in zip(cpu.parameters(), gpu.parameters()):
                g = torch.randn(pc.shape, generator=gen)
                pc.grad = g.clone()
                pg.grad = g.cuda()
            t0 = time.perf_counter()
            wc.step()
            t1 = time.perf_counter()
            wg.step()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            tc += t1 - t0
            tg += t2 - t1
            worst, ndiff = compare(cpu, gpu)
            sc, sg = wc.stats(), wg.stats()
            same &= ndiff == 0 and sc["bytes_pushed"] == sg["bytes_pushed"] and \
                sc["bytes_pulled"] == sg["bytes_pulled"]
            print(f"[{name}] step={t} max_abs_diff={worst:.3g} params_differing={ndiff} "
                  f"pushed cpu={sc['bytes_pushed']} gpu={sg['bytes_pushed']} "
                  f"pulled cpu={sc['bytes_pulled']} gpu={sg['bytes_pulled']} "
                  f"ms cpu={1e3 * (t1 - t0):.2f} gpu={1e3 * (t2 - t1):.2f}", flush=True)
        fc = wc.finish(out=io.StringIO())
        fg = wg.finish(out=io.StringIO())
        worst, ndiff = compare(cpu, gpu)
        same &= ndiff == 0 and fc["bytes_pushed"] == fg["bytes_pushed"]
        print(f"[{name}] final max_abs_diff={worst:.3g} params_differing={ndiff} "
              f"pushed cpu={fc['bytes_pushed']} gpu={fg['bytes_pushed']} "
              f"device cpu={fc['device']} gpu={fg['device']} "
              f"step ms mean cpu={1e3 * tc / steps:.2f} gpu={1e3 * tg / steps:.2f}", flush=True)
    except Exception as e:  # report and go on with the next variant
        import traceback

        traceback.print_exc()
        print(f"[{name}] error: {type(e).__name__}: {e}", flush=True)
        same = False
    finally:
        for j in jobs:
            j.close()
    print(f"[{name}] bit_identical={'yes' if same else 'NO'}", flush=True)
    return same


def main():
    import torch

    if not torch.cuda.is_available():
        print("diag_cuda: no CUDA device: skipped")
        return 77
    ok = True
    for v in VARIANTS:
        ok &= run(*v)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
