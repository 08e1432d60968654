#!/usr/bin/env python3
"""Where a dcps.torch step's time goes (bench/torch.sh -x overhead).

One dcps.torch worker, two real shards on 127.0.0.1 (async, dense push and pull,
SGD), the MLP 784-256-128-10 on the first 16,384 Fashion-MNIST images, batch 64,
one thread. Each step is timed in four parts:
  compute   PyTorch's forward and backward pass (the user's work)
  step_c    Step.run: libdcps's step, the same C code dcps-worker runs (encode,
            push, pull into the model), with the GIL released
  wrapper   what dcps.torch adds around it: gathering the gradients (checking
            each parameter's .grad is still a view of the flat buffer), zeroing
            the gradient buffer, reading the clock for the progress line
Prints one CSV row per repetition: rep,steps,compute_ms,step_c_ms,wrapper_ms,
wrapper_pct (wrapper over compute + step_c + wrapper). DCPS_BUILDDIR names the
build tree (dcps-server), PYTHONPATH its python/ folder.
"""
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "examples", "torch"))
sys.path.insert(0, os.path.join(here, "..", "python", "tests"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dcps.torch as dt  # noqa: E402
import harness  # noqa: E402
from fashion_cnn import read_idx  # noqa: E402


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    torch.set_num_threads(1)
    x = torch.from_numpy(read_idx(harness.TRAIN[0]).reshape(-1, 784)[:16384]
                         .astype(np.float32) / np.float32(255))
    y = torch.from_numpy(read_idx(harness.TRAIN[1])[:16384].astype(np.int64))
    print("rep,steps,compute_ms,step_c_ms,wrapper_ms,wrapper_pct")
    for rep in range(1, reps + 1):
        job = harness.Job(harness.job_text(workers=1, model={"layers": "784,256,128,10"},
                                           worker={"log_every": 1000000}), shards=2)
        try:
            model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                        torch.nn.Linear(256, 128), torch.nn.ReLU(),
                                        torch.nn.Linear(128, 10))
            w = dt.Worker(model, job=job.path, rank=0, overrides=[job.shards])
            t = np.zeros(3)
            steps = 0
            for at in range(0, len(y), 64):
                t0 = time.perf_counter()
                F.cross_entropy(model(x[at:at + 64]), y[at:at + 64]).backward()
                t1 = time.perf_counter()
                w._gather_grads()
                t2 = time.perf_counter()
                w._step.run(w._grad_np, w._flat_np, w.epoch)
                t3 = time.perf_counter()
                w._grad.zero_()
                _ = w.clock
                t4 = time.perf_counter()
                t += (t1 - t0, t3 - t2, (t2 - t1) + (t4 - t3))
                steps += 1
            with open(os.devnull, "w") as null:
                w.finish(out=null)
            ms = t / steps * 1e3
            print(f"{rep},{steps},{ms[0]:.3f},{ms[1]:.3f},{ms[2]:.3f},"
                  f"{100 * ms[2] / ms.sum():.2f}", flush=True)
        finally:
            job.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
