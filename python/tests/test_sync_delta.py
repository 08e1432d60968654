#!/usr/bin/env python3
"""Sync mode with delta pulls, on the built-in MLP (dcps-worker, 2 shards, 2
workers, dense pushes): the final model every rank evaluates is the one the
workers trained, the shards' shared mirror, and not w, which also holds the
changes the deltas have not carried yet (issue 29: 0.77 for w against 0.88 for
the mirror after 10 epochs). So each rank's final: line reports the same test
loss and accuracy as its evaluation after the last epoch, which is of the copy
it pulled. With async delta pulls each worker has a mirror of its own and the
final model stays w (a rank's last copy differs from it)."""
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

EPOCHS = 3


def job(mode):
    return harness.job_text(
        shards=2, workers=2, job={"mode": mode},
        data={"epochs": EPOCHS, "train_limit": 4096},
        compression={"push": "dense", "pull": "delta", "density": 0.01})


def last_epoch(text):
    """(test_loss, test_acc) of the last epoch's evaluation line."""
    m = re.findall(rf"epoch={EPOCHS} done: .* test_loss=(\S+) test_acc=(\S+)", text)
    return m[-1] if m else None


class SyncDelta(unittest.TestCase):
    def run_job(self, mode):
        j = harness.Job(job(mode), shards=2)
        try:
            ps = [j.spawn_c_worker(r) for r in range(2)]
            for r, p in enumerate(ps):
                self.assertEqual(j.wait(p), 0, j.output(f"worker{r}", "err"))
            return [j.output(f"worker{r}") for r in range(2)]
        finally:
            j.close()

    def test_sync_final_model_is_the_mirror_the_workers_trained(self):
        outs = self.run_job("sync")
        finals = [harness.final(o) for o in outs]
        for r, (out, f) in enumerate(zip(outs, finals)):
            self.assertEqual(f.get("pull"), "delta", out)
            self.assertEqual(last_epoch(out), (f["test_loss"], f["test_acc"]),
                             f"rank {r}: the final model is not the copy it trained on")
        self.assertEqual(finals[0]["test_loss"], finals[1]["test_loss"])

    def test_async_final_model_is_w_the_same_on_every_rank(self):
        outs = self.run_job("async")
        finals = [harness.final(o) for o in outs]
        self.assertEqual(finals[0]["test_loss"], finals[1]["test_loss"])
        self.assertNotEqual(last_epoch(outs[0]), (finals[0]["test_loss"], finals[0]["test_acc"]),
                            "the test needs a rank whose copy is off w")


if __name__ == "__main__":
    harness.main(need_torch=False)
