#!/usr/bin/env python3
"""The example scripts of examples/torch/ run: char_lm.py's transformer, made
tiny, on a slice of Debian's fortunes, trains through 2 real shards and 2
workers with the SGD job's compression (Top-k 1% with error feedback, delta
pulls) and in its single-process reference mode, and in both its held-out
bits per character fall from the untrained model's. Skipped (77) without
PyTorch or the fortunes package."""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

CHAR_LM = os.path.join(harness.SRC, "examples", "torch", "char_lm.py")
SGD_JOB = os.path.join(harness.SRC, "examples", "torch", "char_lm_sgd.ini")
# A tiny model on 256 windows: 8 steps of 16 a worker, a few seconds.
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--context", "32",
        "--train-limit", "256", "--evals", "2", "--sample", "20"]


def heldout(text, who):
    """The bpc values of who's held-out lines, in order."""
    return [float(m.group(1)) for m in
            re.finditer(rf"^heldout: {who} .*? bpc=([0-9.]+)", text, flags=re.M)]


def untrained_bpc():
    """The held-out bpc of the tiny model as initialised (the scripts' seed)."""
    import torch

    sys.path.insert(0, os.path.dirname(CHAR_LM))
    import char_lm

    torch.manual_seed(1)
    text, held, _ = char_lm.load_corpus(char_lm.CORPUS)
    model = char_lm.CharTransformer(1, 32, 2, 32)
    return char_lm.evaluate(model, char_lm.windows(held, 32))[0] / char_lm.LN2


class CharLM(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.start = untrained_bpc()

    def test_trains_through_shards_with_topk_and_delta_pulls(self):
        text = harness.job_text(
            job={"name": "char-lm-test", "workers": 2, "mode": "async", "seed": 42},
            model={"layers": None, "params": "auto"},
            data={"batch_size": 16, "epochs": 1, "train_limit": None},
            optimizer={"kind": "sgd", "lr": 0.5},
            compression={"push": "topk", "pull": "delta", "density": 0.01,
                         "error_feedback": "true"},
            worker={"log_every": 4, "timeout_ms": 30000},
            server={"dead_after_ms": 30000})
        job = harness.Job(text)
        try:
            procs = [job.spawn(r, [sys.executable, CHAR_LM, *TINY]) for r in range(2)]
            codes = [job.wait(p) for p in procs]
            out = [job.output(f"worker{r}") for r in range(2)]
            err = [job.output(f"worker{r}", "err") for r in range(2)]
            self.assertEqual(codes, [0, 0], f"{out}\n{err}")
            for r in range(2):
                self.assertEqual(harness.final(out[r]).get("steps"), "8", out[r])
            bpc0, bpc1 = heldout(out[0], "dcps rank=0"), heldout(out[1], "dcps rank=1")
            self.assertEqual(len(bpc0), 2, out[0])  # one during training, one at the end
            # Both ranks evaluate the shards' final parameters (an exact pull).
            self.assertEqual(bpc0[-1], bpc1[-1])
            print(f"untrained {self.start:.3f} bpc, after 16 steps through dcps {bpc0[-1]:.3f}")
            self.assertLess(bpc0[-1], self.start - 1.0)
            self.assertIn("sample: ", out[0])
        finally:
            job.close()

    def test_reference_reads_the_job_and_trains(self):
        p = subprocess.run([sys.executable, CHAR_LM, "--reference", SGD_JOB, *TINY],
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        bpc = heldout(p.stdout, "reference kind=sgd")
        self.assertEqual(len(bpc), 2, p.stdout)
        self.assertRegex(p.stdout, r"(?m)^final: reference kind=sgd steps=16 samples=512 ")  # 2 epochs of 8 batches of 32
        print(f"untrained {self.start:.3f} bpc, after 16 steps of torch.optim.SGD {bpc[-1]:.3f}")
        self.assertLess(bpc[-1], self.start - 1.0)


if __name__ == "__main__":
    if not os.path.isfile("/usr/share/games/fortunes/cookie"):
        print("SKIP: Debian's fortunes package is not installed (apt-get install fortunes)")
        sys.exit(77)
    harness.main(need_data=False)
