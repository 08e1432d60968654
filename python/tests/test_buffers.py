#!/usr/bin/env python3
"""The model's buffers through dcps.torch (docs/pytorch.md, "Buffers"): two
workers train a torchvision ResNet-18 (BatchNorm) on different examples; after
finish() every rank's state_dict, parameters and buffers, is the same bit for
bit, and so is every rank's evaluation: with buffers="rank0" the buffers are
rank 0's, with "average" the mean of the two ranks'; with "local" each rank
keeps its own (the parameters are still the same)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "buffers_worker.py")


def run(mode):
    """Two workers in `mode`; returns their results (buffers_worker.py)."""
    import torch

    text = harness.job_text(job={"mode": "sync"}, model={"layers": None, "params": "auto"},
                            worker={"buffer_every": 2, "timeout_ms": 20000},
                            server={"heartbeat_ms": 200, "dead_after_ms": 60000})
    job = harness.Job(text, shards=2)
    try:
        out = os.path.join(job.dir, "res")
        ps = [job.spawn(r, [sys.executable, WORKER, "--buffers", mode, "--out", out])
              for r in range(2)]
        for r, p in enumerate(ps):
            if job.wait(p, timeout=600) != 0:
                raise AssertionError(f"worker {r} failed:\n" + job.output(f"worker{r}", "err"))
        return [torch.load(f"{out}.r{r}.pt") for r in range(2)]
    finally:
        job.close()


def floating(d):
    return {k: v for k, v in d.items() if v.is_floating_point()}


class Buffers(unittest.TestCase):
    def assert_same(self, a, b, keys=None):
        import torch
        for k in keys or a:
            self.assertTrue(torch.equal(a[k], b[k]), f"{k} differs")

    def test_rank0_every_rank_ends_with_rank_0s_buffers_and_the_same_evaluation(self):
        import torch
        r = run("rank0")
        a0, a1 = r[0]["after"], r[1]["after"]
        self.assert_same(a0, a1)  # parameters and buffers, bit for bit
        b0 = r[0]["before"]
        self.assert_same(a0, b0, b0.keys())  # rank 0's buffers
        b1 = r[1]["before"]
        self.assertFalse(all(torch.equal(b0[k], b1[k]) for k in floating(b0)),
                         "the two ranks' statistics did not differ: the test shows nothing")
        self.assertEqual(r[0]["acc"], r[1]["acc"])

    def test_average_every_rank_ends_with_the_mean_and_the_same_evaluation(self):
        import torch
        r = run("average")
        a0, a1 = r[0]["after"], r[1]["after"]
        self.assert_same(a0, a1)
        b0, b1 = r[0]["before"], r[1]["before"]
        for k in floating(b0):
            mean = ((b0[k].double() + b1[k].double()) / 2).float()
            self.assertTrue(torch.equal(a0[k], mean), f"{k} is not the ranks' mean")
        self.assertTrue(torch.equal(a0["bn1.num_batches_tracked"], b0["bn1.num_batches_tracked"]))
        self.assertEqual(r[0]["acc"], r[1]["acc"])

    def test_local_each_rank_keeps_its_own_buffers_and_the_same_parameters(self):
        import torch
        r = run("local")
        a0, a1 = r[0]["after"], r[1]["after"]
        b0, b1 = r[0]["before"], r[1]["before"]
        self.assert_same(a0, b0, b0.keys())
        self.assert_same(a1, b1, b1.keys())
        params = [k for k in a0 if k not in b0]
        self.assert_same(a0, a1, params)
        self.assertFalse(torch.equal(a0["bn1.running_mean"], a1["bn1.running_mean"]))


if __name__ == "__main__":
    harness.main()
