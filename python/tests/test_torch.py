#!/usr/bin/env python3
"""dcps.torch with real shards and real worker processes: sync mode equals
single-process SGD; the same MLP through dcps.torch and through dcps-worker ends
with the same parameters (one step implementation); a worker killed with
SIGKILL does not stop the others; a model of the wrong size or dtype is refused
with a sentence before anything is pushed; with a GPU, a CUDA model (the step's
device path) ends bit-identical to the same model on the CPU."""
import os
import random
import signal
import sys
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

LAYERS = "784,64,10"
LIMIT = 1024  # training examples: 16 steps of 32 a worker
N = 784 * 64 + 64 + 64 * 10 + 10


def sync_job(**extra):
    # A rank that joins more than dead_after_ms after INIT finds the job gone
    # on without it (and, at the end, refuses to pass for a new run): on a
    # loaded machine importing torch alone takes seconds, so wait long.
    extra.setdefault("server", {}).update({"heartbeat_ms": 200, "dead_after_ms": 30000})
    return harness.job_text(job={"mode": "sync"}, data={"train_limit": LIMIT}, **extra)


def reference_sgd(layers, seed, limit, workers, batch, lr, epochs=1):
    """One process doing what sync mode does: per step, the mean of the
    workers' gradients on their batches, then w -= lr * g (float32)."""
    import torch
    import torch.nn.functional as F

    import dcps
    from mlp_worker import mlp_init, read_idx

    w = mlp_init([int(v) for v in layers.split(",")], seed)
    assert w.size == N
    x = torch.from_numpy(read_idx(harness.TRAIN[0]).reshape(-1, 784)[:limit]
                         .astype(np.float32) / np.float32(255))
    y = torch.from_numpy(read_idx(harness.TRAIN[1])[:limit].astype(np.int64))
    model = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    params = list(model.parameters())
    wt = torch.from_numpy(w)
    for epoch in range(1, epochs + 1):
        orders = []
        for r in range(workers):
            o = np.empty(limit, dtype=np.uint32)
            k = dcps.share(seed, epoch, r, workers, o)
            orders.append(o[:k].astype(np.int64))
        for at in range(0, len(orders[0]), batch):
            g = None
            for r in range(workers):
                with torch.no_grad():
                    off = 0
                    for p in params:
                        p.copy_(wt[off:off + p.numel()].view_as(p))
                        off += p.numel()
                model.zero_grad()
                sel = torch.from_numpy(orders[r][at:at + batch])
                F.cross_entropy(model(x[sel]), y[sel]).backward()
                gr = torch.cat([p.grad.reshape(-1) for p in params])
                g = gr.clone() if g is None else g + gr
            g = g * np.float32(1.0 / workers)
            wt -= np.float32(lr) * g
    return wt.numpy()


def pull_params(job):
    """The shards' parameters, pulled as rank 0 once the workers have left."""
    import dcps

    params = np.zeros(N, dtype=np.float32)
    with dcps.Step(job.path, 0, N, [job.shards]) as s:
        s.start(params)
    return params


class SyncEqualsSGD(unittest.TestCase):
    def test_two_torch_workers_equal_one_process_doing_sgd(self):
        job = harness.Job(sync_job(), shards=2)
        try:
            out = os.path.join(job.dir, "params0.f32")
            w = [job.spawn_mlp_worker(0, LAYERS, LIMIT, "--params-out", out),
                 job.spawn_mlp_worker(1, LAYERS, LIMIT)]
            for r, p in enumerate(w):
                self.assertEqual(job.wait(p), 0, job.output(f"worker{r}", "err"))
            f = harness.final(job.output("worker0"))
            self.assertEqual(f["steps"], "16")
            self.assertEqual(f["mode"], "sync")
            got = np.fromfile(out, dtype=np.float32)
            ref = reference_sgd(LAYERS, 42, LIMIT, 2, 32, 0.1)
            from mlp_worker import mlp_init
            init = mlp_init([784, 64, 10], 42)
            scale = np.abs(ref).max()
            worst = np.abs(got - ref).max()
            moved = np.abs(ref - init).max()
            self.assertGreater(moved, 1e3 * 1e-6 * scale, "training did not move the model")
            print(f"worst={worst:.3g} moved={moved:.3g} scale={scale:.3g}", file=sys.stderr)
            self.assertLessEqual(worst, 1e-6 * scale, f"largest difference {worst}")
        finally:
            job.close()


class OneStepImplementation(unittest.TestCase):
    def test_same_mlp_through_dcps_torch_and_dcps_worker(self):
        """Same job and seed, sync and dense: the shards end with the same
        parameters whether dcps-worker or dcps.torch computes the gradients.
        The two compute them with different matrix products (OpenBLAS and
        torch), so they agree to float32 rounding, far closer than to a
        run that differs in one thing (another learning rate)."""
        results = {}
        for who in ("c", "torch", "torch-lr"):
            extra = {"optimizer": {"lr": 0.09}} if who == "torch-lr" else {}
            job = harness.Job(sync_job(**extra), shards=2)
            try:
                if who == "c":
                    w = [job.spawn_c_worker(r) for r in range(2)]
                else:
                    w = [job.spawn_mlp_worker(r, LAYERS, LIMIT) for r in range(2)]
                for r, p in enumerate(w):
                    self.assertEqual(job.wait(p), 0, job.output(f"worker{r}", "err"))
                self.assertEqual(harness.final(job.output("worker0"))["steps"], "16")
                results[who] = pull_params(job)
            finally:
                job.close()
        scale = np.abs(results["c"]).max()
        same = np.abs(results["c"] - results["torch"]).max()
        other = np.abs(results["torch-lr"] - results["torch"]).max()
        print(f"same={same:.3g} other={other:.3g} scale={scale:.3g}", file=sys.stderr)
        self.assertLessEqual(same, 1e-5 * scale, f"dcps-worker and dcps.torch differ by {same}")
        self.assertGreater(other, 100 * same, f"lr 0.09 differs by {other} only")


class Faults(unittest.TestCase):
    def test_sigkill_of_a_torch_worker_in_sync_mode_does_not_stop_the_others(self):
        # 6,400 steps a worker (about 10 s here), killed at a random moment of
        # its first seconds: 20 epochs (1 s here) ended before a fixed 4 s sleep.
        text = harness.job_text(workers=3, job={"mode": "sync"},
                                data={"train_limit": 3072, "epochs": 200})
        job = harness.Job(text, shards=2)
        try:
            w = [job.spawn_mlp_worker(r, LAYERS, 3072) for r in range(3)]
            delay = random.uniform(1.5, 4.0)
            print(f"rank 1 is killed after {delay:.2f} s", file=sys.stderr)
            time.sleep(delay)
            self.assertIsNone(w[1].poll(), "rank 1 ended before it was killed")
            w[1].send_signal(signal.SIGKILL)
            for r in (0, 2):
                self.assertEqual(job.wait(w[r], 240), 0, job.output(f"worker{r}", "err"))
                f = harness.final(job.output(f"worker{r}"))
                self.assertEqual(f["workers"], "3")
                self.assertGreater(int(f["steps"]), 600)
            self.assertIn("worker 1", job.shard_log(0))
        finally:
            job.close()


    def test_a_finished_job_is_not_run_again_as_new(self):
        text = harness.job_text(shards=1, workers=1, data={"train_limit": 640})
        job = harness.Job(text, shards=1)
        try:
            first = job.spawn_mlp_worker(0, LAYERS, 640, tag="first")
            self.assertEqual(job.wait(first, 120), 0, job.output("first", "err"))
            again = job.spawn_mlp_worker(0, LAYERS, 640, tag="again")
            self.assertNotEqual(job.wait(again, 120), 0, job.output("again"))
            err = job.output("again", "err")
            self.assertIn("the shards hold all 20 steps of rank 0", err)
            self.assertIn("already run to its end", err)
            self.assertEqual(harness.final(job.output("again")), {})
        finally:
            job.close()


class Refusals(unittest.TestCase):
    def test_model_of_another_size_is_refused_naming_both_sizes(self):
        import torch

        import dcps
        import dcps.torch as dt

        job = harness.Job(harness.job_text(), shards=2)
        try:
            os.environ.update(DCPS_JOB=job.path, DCPS_RANK="0", DCPS_SET=job.shards)
            model = torch.nn.Sequential(torch.nn.Linear(784, 32), torch.nn.Linear(32, 10))
            with self.assertRaises(dcps.SizeError) as cm:
                dt.Worker(model)
            n = 784 * 32 + 32 + 32 * 10 + 10
            self.assertIn(f"{n} parameters", str(cm.exception))
            self.assertIn(f"{N}", str(cm.exception))
            # Nothing was pushed: the shards are still waiting for rank 0's parameters.
            probe = dcps.Step(job.path, 1, N, [job.shards])
            self.assertEqual(probe.stats()["bytes_pushed"], 0)
            probe.close()
            self.assertNotIn("initialised", job.shard_log(0) + job.shard_log(1))
        finally:
            for k in ("DCPS_JOB", "DCPS_RANK", "DCPS_SET"):
                os.environ.pop(k, None)
            job.close()

    def test_params_auto_rank_1_of_another_size_is_refused_by_the_shards(self):
        """[model] params = auto: rank 0's model sizes the shards; rank 1 with
        another model is refused by them (SIZE, both sizes named) before it
        pushes anything, and rank 0's model is left as it was."""
        import torch

        import dcps
        import dcps.torch as dt

        job = harness.Job(harness.job_text(model={"layers": None, "params": "auto"}), shards=2)
        try:
            torch.manual_seed(3)
            big = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.Linear(64, 10))
            small = torch.nn.Sequential(torch.nn.Linear(784, 32), torch.nn.Linear(32, 10))
            before = [p.detach().clone() for p in big.parameters()]
            w0 = dt.Worker(big, job=job.path, rank=0, overrides=[job.shards])
            with self.assertRaises(dcps.SizeError) as cm:
                dt.Worker(small, job=job.path, rank=1, overrides=[job.shards])
            text = str(cm.exception)
            self.assertIn(str(N), text)
            self.assertIn(str(784 * 32 + 32 + 32 * 10 + 10), text)
            self.assertEqual(w0.stats()["pushes"], 0)
            w0.finish()  # exact pull: what the shards hold
            for b, p in zip(before, big.parameters()):
                self.assertTrue(torch.equal(b, p.detach()), "the shards' model changed")
        finally:
            job.close()

    def test_float64_other_devices_and_missing_rank_are_refused_naming_the_parameter(self):
        import torch

        import dcps
        import dcps.torch as dt

        model = torch.nn.Sequential(torch.nn.Linear(784, 10), torch.nn.Linear(10, 10).double())
        with self.assertRaises(dcps.ArrayError) as cm:
            dt.Worker(model, job="/nonexistent.ini", rank=0)
        self.assertIn("1.weight", str(cm.exception))
        self.assertIn("float64", str(cm.exception))
        # neither CPU nor CUDA: refused naming the parameter and its device
        model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2, device="meta"))
        with self.assertRaises(dcps.ArrayError) as cm:
            dt.Worker(model, job="/nonexistent.ini", rank=0)
        self.assertIn("1.weight is on meta", str(cm.exception))
        os.environ.pop("DCPS_RANK", None)
        with self.assertRaises(dcps.ConfigError) as cm:
            dt.Worker(torch.nn.Linear(2, 2), job="/nonexistent.ini")
        self.assertIn("DCPS_RANK", str(cm.exception))


def _cuda():
    import torch

    return torch.cuda.is_available()


def _twins(comp, mode="async"):
    """Two jobs of one worker each (comp: their [compression]), and a small
    model on the CPU with its copy on the GPU."""
    import copy

    import torch

    text = harness.job_text(workers=1, model={"layers": None, "params": "auto"},
                            job={"mode": mode}, compression=comp)
    jobs = [harness.Job(text, shards=2), harness.Job(text, shards=2)]
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(40, 300), torch.nn.ReLU(), torch.nn.Linear(300, 10))
    return jobs, cpu, copy.deepcopy(cpu).cuda()


class CudaModel(unittest.TestCase):
    @unittest.skipUnless(_cuda(), "no CUDA device")
    def test_a_cuda_model_ends_bit_identical_to_the_same_model_on_the_cpu(self):
        """The same model and the same gradients (set by hand, so that no
        kernel of torch's differs), each the one worker of its own job: the
        device path (Top-k + error feedback on the GPU, deltas scattered there)
        and the host path push the same bytes and hold the same bits."""
        import io

        import torch

        import dcps.torch as dt

        comp = {"push": "topk", "density": 0.05, "pull": "delta", "warmup_steps": 1,
                "correction_every": 4}
        jobs, cpu, gpu = _twins(comp)
        try:
            wc = dt.Worker(cpu, job=jobs[0].path, rank=0, overrides=[jobs[0].shards])
            wg = dt.Worker(gpu, job=jobs[1].path, rank=0, overrides=[jobs[1].shards])
            for t in range(10):
                gen = torch.Generator().manual_seed(t)
                for pc, pg in zip(cpu.parameters(), gpu.parameters()):
                    g = torch.randn(pc.shape, generator=gen)
                    pc.grad = g.clone()
                    pg.grad = g.cuda()
                wc.step()
                wg.step()
                for pc, pg in zip(cpu.parameters(), gpu.parameters()):
                    self.assertTrue(torch.equal(pc.detach(), pg.detach().cpu()), f"step {t}")
                self.assertEqual(wc.stats()["bytes_pushed"], wg.stats()["bytes_pushed"])
                self.assertEqual(wc.stats()["bytes_pulled"], wg.stats()["bytes_pulled"])
            final_c = wc.finish(out=io.StringIO())
            final_g = wg.finish(out=io.StringIO())
            self.assertEqual(final_g["device"], "gpu")
            self.assertEqual(final_c["bytes_pushed"], final_g["bytes_pushed"])
            for pc, pg in zip(cpu.parameters(), gpu.parameters()):
                self.assertTrue(torch.equal(pc.detach(), pg.detach().cpu()), "final pull")
        finally:
            for j in jobs:
                j.close()

    @unittest.skipUnless(_cuda(), "no CUDA device")
    def test_cuda_buckets_end_bit_identical_to_cpu_buckets(self):
        """Buckets on a CUDA model (staged through host buffers, each pushed
        by its own thread once its copy is done): the same gradients, made by
        a backward pass that gives them exactly (p * c summed, plus 0 times the
        model's output, so that the forward's hooks run), pushed during
        backward on both devices, hold the same bits after every step: dense
        in sync, Top-k with delta pulls in async, and dense with ordered pulls
        (compared after the next forward pass, whose hooks landed them); the
        state_dict and finish() too."""
        import io

        import torch

        import dcps.torch as dt

        dense = {"push": "dense", "pull": "dense"}
        topk = {"push": "topk", "density": 0.05, "pull": "delta", "warmup_steps": 1}
        for comp, mode, ordered in ((dense, "sync", False), (topk, "async", False),
                                    (dense, "sync", True)):
            jobs, cpu, gpu = _twins(comp, mode)
            try:
                x = torch.randn(4, 40)
                ws = [dt.Worker(m, job=j.path, rank=0, overrides=[j.shards], bucket_mb=0.01,
                                ordered_pull=ordered) for m, j in ((cpu, jobs[0]), (gpu, jobs[1]))]
                wc, wg = ws
                self.assertTrue(wg._staging.cuda)
                self.assertGreaterEqual(len(wg._buckets), 2)
                what = f"{comp['push']} {mode} ordered={ordered}"
                for t in range(8):
                    gen = torch.Generator().manual_seed(t)
                    cs = [torch.randn(p.shape, generator=gen) for p in cpu.parameters()]
                    out_c, out_g = cpu(x), gpu(x.cuda())
                    for pc, pg in zip(cpu.parameters(), gpu.parameters()):
                        self.assertTrue(torch.equal(pc.detach(), pg.detach().cpu()),
                                        f"{what}: step {t}")
                    (sum((p * c).sum() for p, c in zip(cpu.parameters(), cs))
                     + 0 * out_c.sum()).backward()
                    (sum((p * c.cuda()).sum() for p, c in zip(gpu.parameters(), cs))
                     + 0 * out_g.sum()).backward()
                    self.assertEqual(wg._sent, [True] * len(wg._buckets))  # during backward
                    wc.step()
                    wg.step()
                    self.assertEqual(wc.stats()["bytes_pushed"], wg.stats()["bytes_pushed"])
                wc.wait()
                wg.wait()
                for pc, pg in zip(cpu.parameters(), gpu.parameters()):
                    self.assertTrue(torch.equal(pc.detach(), pg.detach().cpu()), f"{what}: last")
                sd_c, sd_g = wc.state_dict(), wg.state_dict()
                for k in sd_c:
                    self.assertEqual(sd_g[k].device.type, "cuda")
                    self.assertTrue(torch.equal(sd_c[k], sd_g[k].cpu()), f"{what}: {k}")
                self.assertEqual(wg.finish(out=io.StringIO())["device"], "gpu")
                wc.finish(out=io.StringIO())
                for pc, pg in zip(cpu.parameters(), gpu.parameters()):
                    self.assertTrue(torch.equal(pc.detach(), pg.detach().cpu()),
                                    f"{what}: final pull")
            finally:
                for j in jobs:
                    j.close()

if __name__ == "__main__":
    harness.main()
