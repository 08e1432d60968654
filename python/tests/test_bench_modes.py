#!/usr/bin/env python3
"""The breakdown modes of bench/netem.sh -x torch do what they claim, on the real
Fashion-MNIST files: examples/torch/fashion_cnn.py --comm-only makes every step's
messages through 2 real shards and changes no parameter (the final exact pull
gives back the initial model: its test loss is the untrained model's, to the
last digit printed), and bench/ddp_cnn.py --alone trains one rank's own copy with
no process group (its test loss falls; with a hook it is refused, exit 2).
Skipped (77) without PyTorch or the dataset."""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

EXAMPLES = os.path.join(harness.SRC, "examples", "torch")
FASHION = os.path.join(EXAMPLES, "fashion_cnn.py")
DDP = os.path.join(harness.SRC, "bench", "ddp_cnn.py")
LIMITS = ["--train-limit", "256", "--test-limit", "200"]


def untrained_loss(seed):
    """fashion_cnn.py's test loss of its CNN as rank 0 makes it with --seed seed."""
    import torch

    sys.path.insert(0, EXAMPLES)
    import fashion_cnn as fc

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    test = fc.limited(fc.load(fc.DATA, "t10k"), 200, "test")
    return fc.evaluate(fc.MODELS["cnn"](), test)[0]


class Modes(unittest.TestCase):
    def test_comm_only_sends_every_step_and_changes_nothing(self):
        text = harness.job_text(
            job={"name": "comm-only-test", "workers": 2, "mode": "async", "seed": 42},
            model={"layers": None, "params": "auto"},
            data={"batch_size": 32, "epochs": 1, "train_limit": None},
            optimizer={"kind": "sgd", "lr": 0.5},
            worker={"log_every": 1000, "timeout_ms": 30000},
            server={"dead_after_ms": 30000})
        job = harness.Job(text)
        try:
            procs = [job.spawn(r, [sys.executable, FASHION, "--comm-only", *LIMITS])
                     for r in range(2)]
            codes = [job.wait(p) for p in procs]
            out = [job.output(f"worker{r}") for r in range(2)]
            self.assertEqual(codes, [0, 0], f"{out}\n{[job.output(f'worker{r}', 'err') for r in range(2)]}")
            start = untrained_loss(1)
            for r in range(2):
                f = harness.final(out[r])
                self.assertEqual(f.get("steps"), "4", out[r])  # 256 / 2 ranks / 32
                # every step pushed and pulled the whole model (215,000 floats)
                self.assertGreater(int(f["bytes_pushed"]), 4 * 200000 * 4, out[r])
                self.assertEqual(f["test_loss"], f"{start:.4f}", out[r])
        finally:
            job.close()

    def test_ddp_alone_trains_its_own_copy(self):
        args = [sys.executable, DDP, "--world", "2", "--rank", "1", "--port", "1",
                "--epochs", "1", "--lr", "0.1", "--alone", "--train-limit", "6400",
                "--test-limit", "200"]
        p = subprocess.run(args, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        m = re.search(r"^rank=1 epoch=1 done: test_loss=([0-9.]+) .* steps=100$", p.stdout, re.M)
        self.assertIsNotNone(m, p.stdout)
        self.assertLess(float(m.group(1)), untrained_loss(1) - 0.5, p.stdout)  # 6400 / 2 / 32 steps

        p = subprocess.run(args + ["--hook", "fp16"], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("--alone communicates nothing: --hook fp16", p.stderr)


if __name__ == "__main__":
    harness.main()
