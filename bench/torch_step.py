#!/usr/bin/env python3
"""Where a dcps.torch step's time goes (bench/torch.sh -x overhead).

One dcps.torch worker, two real shards on 127.0.0.1 (async, dense push and pull,
SGD), the MLP 784-256-128-10 on the first 16,384 Fashion-MNIST images, batch 64,
one thread. Each step is timed in four parts:
  compute   PyTorch's forward and backward pass (the user's work)
  step_c    Step.run: libdcps's step, the same C code dcps-worker runs (encode,
            push, pull into the model), with the GIL released
  wrapper   the rest of Worker.step: what dcps.torch adds around Step.run
            (gathering the gradients, zeroing them, the loss and clock for the
            progress line)
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


class Timed:
    """A dcps.Step whose run() is timed; everything else passes through."""

    def __init__(self, step):
        self.step = step
        self.seconds = 0.0

    def run(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.step.run(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0

    def __getattr__(self, name):
        return getattr(self.step, name)


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
            timed = Timed(w._step)
            w._step = timed  # Worker.step calls run() on it: its time is libdcps's
            t = np.zeros(3)
            steps = 0
            for at in range(0, len(y), 64):
                t0 = time.perf_counter()
                loss = F.cross_entropy(model(x[at:at + 64]), y[at:at + 64])
                loss.backward()
                t1 = time.perf_counter()
                before = timed.seconds
                w.step(loss)
                t2 = time.perf_counter()
                c = timed.seconds - before
                t += (t1 - t0, c, (t2 - t1) - c)
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
