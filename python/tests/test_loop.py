#!/usr/bin/env python3
"""The rest of a PyTorch training loop on dcps.torch: dt.sampler yields
dt.shard's order (two epochs, two ranks, the skip after a restart, a DataLoader
with worker processes, the batches served again when sync shards went back); gradient accumulation of 4 micro-batches of 8 (loss
scaled by 1/4) equals one batch of 32 in sync mode with 1 worker; bfloat16
autocast on the CPU trains float32 master parameters; worker.optimizer() under
a GradScaler pushes finite steps and skips, says and survives an Inf one;
half-precision parameters are refused with a sentence."""
import contextlib
import io
import os
import sys
import types
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402


def fake_worker(rank, workers=2, batch_size=32, resumed=0, epochs=2):
    """What dt.shard and dt.sampler read of a Worker, without shards."""
    return types.SimpleNamespace(rank=rank, workers=workers, batch_size=batch_size, seed=42,
                                 epochs=epochs, resumed=resumed, clock=resumed, epoch=1,
                                 samples=0, _win_samples=0, _shard_next=1, mode="async")


def one_worker_job(**sections):
    sections.setdefault("model", {}).update({"layers": None, "params": "auto"})
    return harness.job_text(workers=1, job={"mode": "sync"}, **sections)


def small_model(seed):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.ReLU(), torch.nn.Linear(30, 5))


def flat(model):
    import torch

    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


class SamplerOrder(unittest.TestCase):
    def shard_epochs(self, ds, w):
        """dt.shard's indices, one list per epoch, and its batches."""
        import dcps.torch as dt

        per, batches = {}, []
        for (x,) in dt.shard(ds, worker=w):
            per.setdefault(w.epoch, []).extend(x.tolist())
            batches.append(x.tolist())
        return per, batches

    def test_sampler_yields_the_order_of_shard_for_two_epochs_and_two_ranks(self):
        import torch

        import dcps.torch as dt

        ds = torch.utils.data.TensorDataset(torch.arange(1001))
        for rank in range(2):
            want, _ = self.shard_epochs(ds, fake_worker(rank))
            w = fake_worker(rank)
            s = dt.sampler(ds, worker=w)
            self.assertIsInstance(s, torch.utils.data.Sampler)
            for epoch in (1, 2):
                s.set_epoch(epoch)
                self.assertEqual(w.epoch, epoch)
                got = list(s)
                self.assertEqual(len(s), len(got))
                self.assertEqual(got, want[epoch], f"rank {rank} epoch {epoch}")
            self.assertNotEqual(want[1], want[2])
            # samples_per_s and final: count what the sampler handed out
            self.assertEqual(w.samples, len(want[1]) + len(want[2]))
        with self.assertRaises(ValueError) as cm:
            s.set_epoch(0)
        self.assertIn("count from 1", str(cm.exception))

    def test_after_a_restart_the_first_epoch_starts_after_the_held_steps(self):
        import torch

        import dcps.torch as dt

        ds = torch.utils.data.TensorDataset(torch.arange(1001))
        _, want = self.shard_epochs(ds, fake_worker(1, resumed=5))
        _, full = self.shard_epochs(ds, fake_worker(1))
        self.assertEqual(want, full[5:])
        s = dt.sampler(ds, worker=fake_worker(1, resumed=5))
        got = []
        for epoch in (1, 2):
            s.set_epoch(epoch)
            loader = torch.utils.data.DataLoader(ds, batch_size=32, sampler=s, num_workers=2,
                                                 pin_memory=False)
            got += [x.tolist() for (x,) in loader]
        self.assertEqual(got, want)


    def test_sync_shards_that_went_back_have_their_rounds_batches_served_again(self):
        """A shard restarted and every shard went back to round 6 as the step of
        round 9 was pushed (docs/algorithms.md, "Restarts"): the batches of
        rounds 6 to 9 come again, then the rest; a step that leaves the clock
        (skipped) does not."""
        import torch

        import dcps.torch as dt

        ds = torch.utils.data.TensorDataset(torch.arange(1001))
        _, full = self.shard_epochs(ds, fake_worker(1))
        w = fake_worker(1)
        w.mode, got = "sync", []
        for (x,) in dt.shard(ds, worker=w):
            got.append(x.tolist())
            # The step of this batch: round w.clock, done; round 9 went back to 6,
            # and the step of the 3rd batch was skipped (its clock stays).
            w.clock = 6 if len(got) == 10 else w.clock if len(got) == 3 else w.clock + 1
        # batch j is of round j - 1 from the skipped one on: round 6 is batch 7
        self.assertEqual(got, full[:10] + full[7:])
        self.assertEqual(w.epoch, 2)


class Accumulation(unittest.TestCase):
    def run_job(self, micro, steps=6):
        """Sync mode, 1 worker, momentum: `steps` steps of 32 examples, each as
        32 // micro micro-batches whose losses are scaled by micro / 32."""
        import torch
        import torch.nn.functional as F

        import dcps.torch as dt

        gen = torch.Generator().manual_seed(5)
        x = torch.randn(32 * steps, 20, generator=gen)
        y = torch.randint(0, 5, (32 * steps,), generator=gen)
        job = harness.Job(one_worker_job(optimizer={"kind": "momentum", "lr": 0.1,
                                                    "momentum": 0.9}), shards=2)
        try:
            model = small_model(11)
            w = dt.Worker(model, job=job.path, rank=0, overrides=[job.shards])
            start = flat(model)
            k = 32 // micro
            for t in range(steps):
                xs, ys = x[32 * t:32 * (t + 1)].chunk(k), y[32 * t:32 * (t + 1)].chunk(k)
                for i in range(k):
                    ctx = w.no_sync() if i < k - 1 else contextlib.nullcontext()
                    with ctx:
                        (F.cross_entropy(model(xs[i]), ys[i]) / k).backward()
                w.step()
            self.assertEqual(w.clock, steps)
            w.finish(out=io.StringIO())
            return start, flat(model)
        finally:
            job.close()

    def test_four_micro_batches_of_8_equal_one_batch_of_32(self):
        start, one = self.run_job(32)
        _, four = self.run_job(8)
        scale = np.abs(one).max()
        diff = np.abs(one - four).max()
        moved = np.abs(one - start).max()
        print(f"diff={diff:.3g} moved={moved:.3g} scale={scale:.3g}", file=sys.stderr)
        self.assertGreater(moved, 1e-2)
        self.assertLessEqual(diff, 1e-6 * max(scale, 1.0), f"largest difference {diff}")


class MixedPrecision(unittest.TestCase):
    def test_half_precision_parameters_are_refused_naming_master_parameters(self):
        import torch

        import dcps
        import dcps.torch as dt

        for dtype in (torch.float16, torch.bfloat16):
            model = torch.nn.Linear(4, 2).to(dtype)
            with self.assertRaises(dcps.ArrayError) as cm:
                dt.Worker(model, job="/nonexistent.ini", rank=0)
            self.assertIn("float32 master parameters", str(cm.exception))
            self.assertIn("torch.autocast", str(cm.exception))

    def test_bf16_autocast_and_grad_scaler_through_worker_optimizer(self):
        """bfloat16 autocast on the CPU (torch 1.13 has it); GradScaler is
        CUDA's in 1.13 and disables itself without CUDA, so its step() calls
        the optimizer's every time: worker.optimizer() itself finds the Inf
        put into a gradient, pushes nothing, says so, and the next step runs."""
        import warnings

        import torch
        import torch.nn.functional as F

        import dcps.torch as dt

        gen = torch.Generator().manual_seed(2)
        x = torch.randn(256, 20, generator=gen)
        y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
        job = harness.Job(one_worker_job(optimizer={"kind": "sgd", "lr": 0.5}), shards=2)
        try:
            model = small_model(3)
            w = dt.Worker(model, job=job.path, rank=0, overrides=[job.shards])
            opt = w.optimizer()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                scaler = torch.cuda.amp.GradScaler(enabled=torch.cuda.is_available())
            losses = []
            out = io.StringIO()
            for t in range(40):
                opt.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    logits = model(x)
                    self.assertEqual(logits.dtype, torch.bfloat16)
                    loss = F.cross_entropy(logits.float(), y)
                scaler.scale(loss).backward()
                if t == 20:
                    model[0].weight.grad[0, 0] = float("inf")
                    pushes = w.stats()["pushes"]
                with contextlib.redirect_stderr(out):
                    scaler.step(opt)
                scaler.update()
                if t == 20:
                    self.assertEqual(w.clock, 20, "the Inf step was pushed")
                    self.assertEqual(w.stats()["pushes"], pushes)
                losses.append(loss.item())
            self.assertIn("step=20 skipped: the gradient of 0.weight entry 0 is inf",
                          out.getvalue())
            self.assertEqual(opt.skipped, 1)
            self.assertEqual(w.clock, 39)
            self.assertTrue(all(p.dtype == torch.float32 for p in model.parameters()))
            self.assertLess(np.mean(losses[-5:]), 0.7 * np.mean(losses[:5]), losses)
            w.finish(out=io.StringIO())
        finally:
            job.close()


if __name__ == "__main__":
    harness.main()
