#!/usr/bin/env python3
"""dcps.torch as real training scripts use it (issue 28, part 0), each test
with one worker and real shards: dt.shard called once per epoch serves every
epoch and honours a DataLoader's batch size and drop_last; a parameter moved
out of dcps's buffer, or weights loaded into a wrapped model, are refused
instead of silently dropped; a submodule's state_dict saves that submodule
only; a non-finite gradient skips the step and the worker goes on; the
final: line's elapsed_s leaves out finish()'s evaluate()."""
import io
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402


def one_worker_job(**sections):
    """One worker and one shard, the model's size from its HELLO, the given
    sections."""
    sections.setdefault("model", {}).update({"layers": None, "params": "auto"})
    return harness.Job(harness.job_text(shards=1, workers=1, **sections), shards=1)


def worker(job, model):
    import dcps.torch as dt

    return dt.Worker(model, job=job.path, rank=0, overrides=[job.shards])


def dataset(n, features=4):
    import torch

    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(torch.randn(n, features, generator=g),
                                          torch.arange(n))


def train_on(w, model, batches):
    """One step per batch; returns the examples' indices seen, in order."""
    import torch

    seen = []
    for x, i in batches:
        model(x).square().mean().backward()
        w.step()
        seen += [int(v) for v in i]
    return seen


class Shard(unittest.TestCase):
    def test_one_call_per_epoch_serves_every_epoch_whole(self):
        """for epoch in range(3): dt.shard(ds, epochs=1), after steps made
        outside it: each call is the next epoch of the job, every example."""
        import torch

        import dcps
        import dcps.torch as dt

        job = one_worker_job(data={"epochs": 3, "batch_size": 8})
        try:
            model = torch.nn.Linear(4, 2)
            w = worker(job, model)
            for _ in range(2):  # steps outside shard: a warm-up on other data
                model(torch.ones(1, 4)).sum().backward()
                w.step()
            ds = dataset(32)
            for epoch in (1, 2, 3):
                seen = train_on(w, model, dt.shard(ds, epochs=1))
                self.assertEqual(sorted(seen), list(range(32)), f"epoch {epoch}")
                self.assertEqual(w.epoch, epoch)
            with self.assertRaises(dcps.StateError) as cm:
                dt.shard(ds)  # the job's 3 epochs are all served
            self.assertIn("all 3 epochs", str(cm.exception))
            more = train_on(w, model, dt.shard(ds, epochs=1))  # asked for: epoch 4
            self.assertEqual(sorted(more), list(range(32)))
            self.assertEqual(w.epoch, 4)
            self.assertEqual(w.clock, 2 + 4 * 4)
            w.finish(out=io.StringIO())
        finally:
            job.close()

    def test_a_restarted_worker_calling_once_per_epoch_skips_only_what_the_shards_hold(self):
        """A worker that trained epoch 1 and part of epoch 2 leaves; its
        restart, running the same loop, skips those batches and trains the
        rest, ending with the job's steps."""
        import torch

        import dcps.torch as dt

        job = one_worker_job(data={"epochs": 3, "batch_size": 8})
        try:
            ds = dataset(32)
            model = torch.nn.Linear(4, 2)
            w = worker(job, model)
            train_on(w, model, dt.shard(ds, epochs=1))
            train_on(w, model, [b for _, b in zip(range(3), dt.shard(ds, epochs=1))])
            w.close()  # leaves after 4 + 3 steps
            model = torch.nn.Linear(4, 2)
            w = worker(job, model)
            self.assertEqual(w.resumed, 7)
            err, stderr = io.StringIO(), sys.stderr
            sys.stderr = err
            try:
                seen = [train_on(w, model, dt.shard(ds, epochs=1)) for _ in range(3)]
            finally:
                sys.stderr = stderr
            self.assertEqual(seen[0], [])
            self.assertIn("epochs 1 to 1 are held by the shards already", err.getvalue())
            self.assertEqual(len(seen[1]), 8, "epoch 2: its last batch")
            self.assertEqual(sorted(seen[2]), list(range(32)))
            self.assertEqual(w.finish(out=io.StringIO())["steps"], 12)
        finally:
            job.close()

    def test_a_dataloaders_batch_size_and_drop_last_are_kept(self):
        import torch

        import dcps.torch as dt

        job = one_worker_job(data={"epochs": 3, "batch_size": 8})
        try:
            model = torch.nn.Linear(4, 2)
            w = worker(job, model)
            ds = dataset(17)
            loader = torch.utils.data.DataLoader(ds, batch_size=4, drop_last=True)
            sizes = [len(x) for x, _ in dt.shard(loader, epochs=1)]
            self.assertEqual(sizes, [4, 4, 4, 4])
            loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True)
            sizes = [len(x) for x, _ in dt.shard(loader, epochs=1)]
            self.assertEqual(sizes, [4, 4, 4, 4, 1])
            sizes = [len(x) for x, _ in dt.shard(ds, epochs=1, drop_last=True)]
            self.assertEqual(sizes, [8, 8])
            w.close()
        finally:
            job.close()

    def test_an_iterable_dataset_is_refused_with_a_sentence(self):
        import torch

        import dcps.torch as dt

        class Stream(torch.utils.data.IterableDataset):
            def __iter__(self):
                return iter(range(10))

        job = one_worker_job()
        try:
            w = worker(job, torch.nn.Linear(4, 2))
            for data in (Stream(), torch.utils.data.DataLoader(Stream(), batch_size=2)):
                with self.assertRaises(TypeError) as cm:
                    dt.shard(data)
                self.assertIn("IterableDataset", str(cm.exception))
                self.assertIn("map-style", str(cm.exception))
            w.close()
        finally:
            job.close()


class Model(unittest.TestCase):
    def test_a_parameter_moved_out_of_the_buffer_is_refused_by_step(self):
        import torch

        import dcps

        job = one_worker_job()
        try:
            model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(),
                                        torch.nn.Linear(4 * 4 * 4, 2))
            w = worker(job, model)
            model(torch.ones(2, 3, 6, 6)).sum().backward()
            w.step()
            model.to(memory_format=torch.channels_last)
            model(torch.ones(2, 3, 6, 6)).sum().backward()
            pushes = w.stats()["pushes"]
            with self.assertRaises(dcps.ArrayError) as cm:
                w.step()
            self.assertIn("0.weight", str(cm.exception))
            self.assertIn("before dcps.torch.Worker(model)", str(cm.exception))
            self.assertEqual(w.stats()["pushes"], pushes, "pushed after the refusal")
            w.close()
        finally:
            job.close()

    def test_load_state_dict_into_a_wrapped_model_is_refused_until_finish(self):
        import torch

        import dcps

        job = one_worker_job()
        try:
            model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(),
                                        torch.nn.Linear(3, 2))
            w = worker(job, model)
            before = {k: v.clone() for k, v in model.state_dict().items()}
            other = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(),
                                        torch.nn.Linear(3, 2))
            for target, sd in ((model, other.state_dict()), (model[2], other[2].state_dict())):
                with self.assertRaises(dcps.StateError) as cm:
                    target.load_state_dict(sd)
                self.assertIn("load_state_dict", str(cm.exception))
                self.assertIn("before dcps.torch.Worker(model)", str(cm.exception))
            for k, v in model.state_dict().items():
                self.assertTrue(torch.equal(v, before[k]), f"{k} changed by a refused load")
            w.finish(out=io.StringIO())
            model.load_state_dict(other.state_dict())  # the model is the script's again
            self.assertTrue(torch.equal(model[2].bias, other[2].bias))
        finally:
            job.close()

    def test_a_submodules_state_dict_saves_that_submodule_only(self):
        import torch

        job = one_worker_job()
        try:
            model = torch.nn.Sequential(torch.nn.Linear(1000, 100), torch.nn.ReLU(),
                                        torch.nn.Linear(100, 10))
            w = worker(job, model)
            buf = io.BytesIO()
            torch.save(model[2].state_dict(), buf)
            # 1010 floats and pickling: a few kB, not the model's 400 kB.
            self.assertLess(buf.tell(), 16 * 1024, f"{buf.tell()} bytes for 1010 floats")
            fresh = torch.nn.Linear(100, 10)
            buf.seek(0)
            fresh.load_state_dict(torch.load(buf))
            self.assertTrue(torch.equal(fresh.weight, model[2].weight))
            self.assertTrue(torch.equal(fresh.bias, model[2].bias))
            # keep_vars=True still gives the parameters themselves (torch's contract).
            self.assertIs(model.state_dict(keep_vars=True)["2.bias"], model[2].bias)
            # The whole model's state dict is a copy, not the live buffer.
            sd = model.state_dict()
            model(torch.ones(1, 1000)).sum().backward()
            w.step()
            self.assertFalse(torch.equal(sd["2.bias"], model[2].bias.detach()))
            w.close()
        finally:
            job.close()


class Steps(unittest.TestCase):
    def test_a_non_finite_gradient_skips_the_step_and_the_worker_goes_on(self):
        import torch

        job = one_worker_job()
        try:
            model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
            w = worker(job, model)
            model(torch.ones(1, 4)).sum().backward()
            w.step()
            held = [p.detach().clone() for p in model.parameters()]
            model(torch.ones(1, 4)).sum().backward()
            model[1].bias.grad[1] = float("inf")
            pushes, clock = w.stats()["pushes"], w.clock
            err = io.StringIO()
            stderr, sys.stderr = sys.stderr, err
            try:
                w.step()
            finally:
                sys.stderr = stderr
            self.assertEqual(w.skipped_steps, 1)
            self.assertEqual((w.stats()["pushes"], w.clock), (pushes, clock), "it pushed")
            self.assertIn("1.bias", err.getvalue())
            self.assertIn("skipped", err.getvalue())
            for h, p in zip(held, model.parameters()):
                self.assertTrue(torch.equal(h, p.detach()))
                self.assertEqual(float(p.grad.abs().sum()), 0.0, "gradients not zeroed")
            model(torch.ones(1, 4)).sum().backward()
            w.step()  # the next finite step is pushed
            self.assertEqual(w.clock, clock + 1)
            f = w.finish(out=io.StringIO())
            self.assertEqual(f["steps"], 2)
        finally:
            job.close()

    def test_elapsed_s_leaves_out_the_evaluation_in_finish(self):
        import torch

        import dcps.torch as dt

        job = one_worker_job(data={"batch_size": 8})
        try:
            model = torch.nn.Linear(4, 2)
            t0 = time.monotonic()
            w = worker(job, model)
            train_on(w, model, dt.shard(dataset(64)))
            trained = time.monotonic() - t0

            def evaluate(m):
                time.sleep(2)
                return 0.5

            f = w.finish(evaluate=evaluate, out=io.StringIO())
            self.assertEqual(f["test_acc"], 0.5)
            self.assertLess(f["elapsed_s"], trained + 0.5,
                            f"elapsed_s {f['elapsed_s']} for {trained:.2f} s of training")
            self.assertGreater(f["samples_per_s"], 64 / (trained + 0.5))
        finally:
            job.close()


if __name__ == "__main__":
    harness.main(need_data=False)
