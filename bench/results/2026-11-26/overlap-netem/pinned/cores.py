#!/usr/bin/env python3
"""Are the 2 vCPUs independent? overlap.py's MLP at batch 3072, forward and backward
on CPU 0 (one torch thread), with CPU 1 idle, running a busy loop, or copying 64 MiB
arrays (python3 cores.py > cores.txt)."""
import os, sys, time, subprocess, torch
torch.set_num_threads(1)
os.sched_setaffinity(0, {0})
torch.manual_seed(0)
layers=[]
for _ in range(8): layers += [torch.nn.Linear(1024,1024), torch.nn.ReLU()]
m=torch.nn.Sequential(*layers[:-1]); x=torch.randn(3072,1024)
def step():
    m.zero_grad(set_to_none=False); m(x).square().mean().backward()
def timed(n=6):
    step(); t=time.perf_counter()
    for _ in range(n): step()
    return (time.perf_counter()-t)/n*1e3
spin = "while True: pass"
mem = "import numpy as np\na=np.ones(16<<20,np.float32); b=np.empty_like(a)\nwhile True: np.copyto(b,a)"
gemm = "import numpy as np\na=np.ones((1024,1024),np.float32)\nwhile True: a@a"
for name, code in (("idle", None), ("alu spin", spin), ("memory copy", mem), ("idle", None), ("alu spin", spin), ("memory copy", mem)):
    p = None
    if code:
        p = subprocess.Popen(["taskset","-c","1",sys.executable,"-c",code], env=dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1"))
        time.sleep(1)
    print(f"{name}: {timed():.1f} ms", flush=True)
    if p: p.kill(); p.wait()
