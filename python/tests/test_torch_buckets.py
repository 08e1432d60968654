#!/usr/bin/env python3
"""dcps.torch's buckets and ordered pulls (Worker(bucket_mb=, ordered_pull=);
docs/pytorch.md, "Buckets"), one worker on real shards: with buckets, a dense
sync job equals torch.optim.SGD to float32 rounding and the whole-gradient
path bit for bit, with ordered pulls too, and the ordered pull's parameters are
an exact pull's; with [compression] values = fp16 buckets equal the whole
fp16 step bit for bit; each bucket has its own Top-k, which is not the whole
gradient's (a bucket of small gradients still sends its share); a parameter
that gets no gradient (unused, or frozen) is pushed as zero at step(); a
gradient changed after its bucket went is refused; what buckets cannot do is
refused with a sentence."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

LR = 0.05
STEPS = 6


def job(mode="sync", **compression):
    sections = {"job": {"mode": mode}, "model": {"layers": None, "params": "auto"},
                "optimizer": {"kind": "sgd", "lr": LR}}
    if compression:
        sections["compression"] = compression
    return harness.Job(harness.job_text(shards=2, workers=1, **sections), shards=2)


def mlp(unused=False):
    """A small MLP; with unused, a layer its forward pass never calls."""
    import torch

    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(20, 64)
            self.b = torch.nn.Linear(64, 64)
            self.idle = torch.nn.Linear(64, 8) if unused else None
            self.c = torch.nn.Linear(64, 3)

        def forward(self, x):
            return self.c(torch.relu(self.b(torch.relu(self.a(x)))))

    return Net()


def batches(steps=STEPS):
    import torch

    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 20, generator=g), torch.randint(0, 3, (8,), generator=g))
            for _ in range(steps)]


def loss_of(model, x, y):
    import torch.nn.functional as F

    return F.cross_entropy(model(x), y)


def train(j, model, data, **kw):
    """Trains model through a Worker on job j; returns the parameters as one
    tensor after the last step's pull has landed, and the Worker (closed)."""
    import torch

    import dcps.torch as dt

    w = dt.Worker(model, job=j.path, rank=0, overrides=[j.shards], **kw)
    for x, y in data:
        loss_of(model, x, y).backward()
        w.step()
    w.wait()
    flat = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    exact = torch.cat([v.reshape(-1) for k, v in w.state_dict().items()])
    w.close()
    return flat, exact, w


def sgd(model, data):
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for x, y in data:
        opt.zero_grad()
        loss_of(model, x, y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def run(model_fn, data, **kw):
    j = job()
    try:
        return train(j, model_fn(), data, **kw)
    finally:
        j.close()


class Buckets(unittest.TestCase):
    def test_dense_sync_buckets_equal_sgd_and_the_whole_step(self):
        """Buckets of 0.0007 MiB (three: one a layer, the middle one across
        both shards), pushed during backward: torch.optim.SGD to float32
        rounding, and the whole gradient path bit for bit, with the pull whole
        or ordered."""
        data = batches()
        ref = sgd(mlp(), data)
        whole, _, _ = run(mlp, data)
        buckets, _, w = run(mlp, data, bucket_mb=0.0007)
        ordered, exact, _ = run(mlp, data, bucket_mb=0.0007, ordered_pull=True)
        self.assertGreaterEqual(len(w._buckets), 3)
        moved = (ref - torch_cat_init()).abs().max().item()
        self.assertGreater(moved, 1e-3, "training did not move the model")
        worst = (buckets - ref).abs().max().item()
        self.assertLessEqual(worst, 1e-6, f"buckets vs torch.optim.SGD: {worst}")
        self.assertTrue(bool((buckets == whole).all()), "buckets vs the whole step")
        self.assertTrue(bool((ordered == whole).all()), "ordered pulls vs the whole step")
        # What the ordered pull left in the model is the shards' parameters.
        self.assertTrue(bool((ordered == exact).all()), "ordered pull vs an exact pull")

    def test_fp16_values_in_buckets_equal_the_whole_step_bit_for_bit(self):
        """[compression] values = fp16 (dense, error feedback): each bucket's
        parts go in fp16 and fp16 rounds value by value, so buckets, pushed
        during backward, end where the whole fp16 step ends, bit for bit, with
        the pull (whole, in fp16) ordered or not, in sync and async jobs; so
        does one bucket over the model with Top-k in fp16."""
        data = batches()
        for mode, comp in (("sync", {"values": "fp16"}), ("async", {"values": "fp16"}),
                           ("async", {"values": "fp16", "push": "topk", "density": 0.05})):
            out = {}
            for name, kw in (("whole", {}), ("buckets", {"bucket_mb": 0.0007}),
                             ("ordered", {"bucket_mb": 0.0007, "ordered_pull": True}),
                             ("one", {"bucket_mb": 1})):
                j = job(mode, **comp)
                try:
                    out[name] = train(j, mlp(), data, **kw)[:2]
                finally:
                    j.close()
            with self.subTest(mode=mode, **comp):
                moved = (out["whole"][1] - torch_cat_init()).abs().max().item()
                self.assertGreater(moved, 1e-3, "training did not move the model")
                # The pulled parameters went through fp16: not the shards' own.
                self.assertFalse(bool((out["whole"][0] == out["whole"][1]).all()))
                for name in ("one",) if "push" in comp else ("buckets", "ordered", "one"):
                    for k, what in enumerate(("pulled", "exact")):
                        self.assertTrue(bool((out[name][k] == out["whole"][k]).all()),
                                        f"{name} vs the whole step, {what}")

    def test_each_bucket_has_its_own_topk_unlike_the_whole_gradient(self):
        """Top-k at density 0.01 on a model whose last layer's gradients are
        scaled by 1e4: the whole gradient's Top-k takes its entries from that
        layer alone, while with buckets the other layers' bucket sends its own
        ceil(0.01 · its length) entries every step. One bucket over the whole
        model is the whole step's Top-k exactly."""
        import torch

        def model():
            m = mlp()
            m.c.weight.register_hook(lambda g: g * 1e4)
            return m

        data = batches(2)
        init = torch.cat([p.detach().reshape(-1).clone() for p in model().parameters()])
        out = {}
        for name, kw in (("whole", {}), ("one", {"bucket_mb": 1}),
                         ("buckets", {"bucket_mb": 0.0007})):
            j = job("async", push="topk", density=0.01)
            try:
                m = model()
                flat, _, w = train(j, m, data, **kw)
                out[name] = flat
                if name == "buckets":
                    c_lo = sum(p.numel() for p in (m.a.weight, m.a.bias, m.b.weight, m.b.bias))
                    self.assertGreaterEqual(len(w._buckets), 3)
            finally:
                j.close()
        front = slice(0, c_lo)  # layers a and b: small gradients
        self.assertTrue(bool((out["one"] == out["whole"]).all()))
        self.assertEqual(int((out["whole"][front] != init[front]).sum()), 0,
                         "the whole gradient's Top-k took entries of the small gradients")
        self.assertGreater(int((out["buckets"][front] != init[front]).sum()), 0,
                           "the small gradients' buckets sent nothing")

    def test_a_parameter_without_gradient_is_pushed_as_zero(self):
        """A layer the forward pass never calls: its bucket is pushed at
        step() with zeros (the sync round would wait for it otherwise), so it
        stays as it was and the rest trains as SGD does."""
        import torch

        data = batches()
        ref = sgd(mlp(unused=True), data)
        init = torch.cat([p.detach().reshape(-1).clone() for p in mlp(True).parameters()])
        for kw in ({"bucket_mb": 0.004}, {"bucket_mb": 0.004, "ordered_pull": True}):
            got, _, _ = run(lambda: mlp(unused=True), data, **kw)
            m = mlp(unused=True)
            lo = m.a.weight.numel() + m.a.bias.numel() + m.b.weight.numel() + m.b.bias.numel()
            hi = lo + m.idle.weight.numel() + m.idle.bias.numel()
            self.assertTrue(bool((got[lo:hi] == init[lo:hi]).all()), kw)
            worst = (got - ref).abs().max().item()
            self.assertLessEqual(worst, 1e-6, f"{kw}: {worst}")

    def test_a_frozen_layer_is_pushed_as_zero_and_unfreezing_it_is_refused(self):
        """A layer with requires_grad=False has no gradient hook: its bucket
        goes at step() as zeros, the layer stays, the rest trains as SGD does.
        Unfreezing it after Worker(...) is refused at the next step."""
        import dcps
        import dcps.torch as dt

        def frozen():
            m = mlp()
            m.a.requires_grad_(False)
            return m

        data = batches()
        ref = sgd(frozen(), data)
        got, _, _ = run(frozen, data, bucket_mb=0.0007)
        init = torch_cat_init()
        m = mlp()
        a = m.a.weight.numel() + m.a.bias.numel()
        self.assertTrue(bool((got[:a] == init[:a]).all()))
        self.assertLessEqual((got - ref).abs().max().item(), 1e-6)
        j = job()
        try:
            m = frozen()
            w = dt.Worker(m, job=j.path, rank=0, overrides=[j.shards], bucket_mb=0.0007)
            m.a.requires_grad_(True)
            x, y = batches(1)[0]
            loss_of(m, x, y).backward()
            with self.assertRaisesRegex(dcps.StateError, "a.weight.requires_grad became True"):
                w.step()
            w.close()
        finally:
            j.close()

    def test_what_buckets_cannot_do_is_refused_with_a_sentence(self):
        import torch

        import dcps
        import dcps.torch as dt

        j = job()
        try:
            with self.assertRaisesRegex(ValueError, "ordered_pull=True needs bucket_mb"):
                dt.Worker(mlp(), job=j.path, rank=0, overrides=[j.shards], ordered_pull=True)
            with self.assertRaisesRegex(ValueError, "bucket_mb=-1"):
                dt.Worker(mlp(), job=j.path, rank=0, overrides=[j.shards], bucket_mb=-1)
            m = mlp()
            w = dt.Worker(m, job=j.path, rank=0, overrides=[j.shards], bucket_mb=0.0007)
            with self.assertRaisesRegex(dcps.StateError, "no_sync\\(\\) with bucket_mb"):
                with w.no_sync():
                    pass
            with self.assertRaisesRegex(dcps.ConfigError, "GradScaler"):
                w.optimizer()
            x, y = batches(1)[0]
            loss_of(m, x, y).backward()
            # Every bucket went during backward, none waits for step().
            self.assertEqual(w._sent, [True] * len(w._buckets))
            with self.assertRaisesRegex(dcps.StateError,
                                        "got a second gradient in step 1, whose bucket"):
                loss_of(m, x, y).backward()
            w.close()
        finally:
            j.close()
        j = job()  # a model of another size: a job of its own (params = auto)
        try:
            deep = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(80)])
            with self.assertRaisesRegex(ValueError, "more than 64 of the ranges.*give a larger "
                                        "bucket_mb"):
                dt.Worker(deep, job=j.path, rank=0, overrides=[j.shards], bucket_mb=1e-9)
        finally:
            j.close()

    def test_a_gradient_changed_after_its_bucket_went_is_refused(self):
        """clip_grad_norm_ between backward() and step(), an in-place op on a
        .grad, or a .grad replaced or set to None: the buckets went during
        backward, so step() refuses rather than lose the change. Reading the
        gradients changes nothing; without buckets clipping still works."""
        import torch

        import dcps
        import dcps.torch as dt

        changes = {
            "changed in place": lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 1e-3),
            "b.bias.grad was replaced": lambda m: setattr(m.b.bias, "grad", m.b.bias.grad * 2),
            "c.weight.grad was set to None": lambda m: setattr(m.c.weight, "grad", None),
            "in place": lambda m: m.a.weight.grad.add_(1.0),
        }
        data = batches(2)
        for what, change in changes.items():
            j = job()
            try:
                m = mlp()
                w = dt.Worker(m, job=j.path, rank=0, overrides=[j.shards], bucket_mb=0.0007)
                (x, y), (x2, y2) = data
                loss_of(m, x, y).backward()
                norm = sum(float(p.grad.norm()) ** 2 for p in m.parameters())  # reads only
                self.assertGreater(norm, 0)
                w.step()
                loss_of(m, x2, y2).backward()
                change(m)
                with self.assertRaisesRegex(dcps.StateError,
                                            f"{what}.*step 2.*the change would be lost"):
                    w.step()
                w.close()
            finally:
                j.close()
        # Without buckets the same clipping is pushed: the step moves the
        # parameters by lr x 1e-3 in norm (float32 rounding of parameters near
        # 0.2 aside), not by lr x the gradient's norm.
        j = job()
        try:
            m = mlp()
            before = torch_cat_init_of(m)
            w = dt.Worker(m, job=j.path, rank=0, overrides=[j.shards])
            x, y = data[0]
            loss_of(m, x, y).backward()
            norm = float(torch.nn.utils.clip_grad_norm_(m.parameters(), 1e-3))
            self.assertGreater(norm, 0.1)
            w.step()
            w.wait()
            after = torch_cat_init_of(m)
            self.assertAlmostEqual(float((after - before).norm()) / (LR * 1e-3), 1.0, delta=0.01)
            w.close()
        finally:
            j.close()


class Staged(unittest.TestCase):
    """A CUDA model's buckets go through host buffers, each pushed by a thread
    of its own once its copy to the host is done, and the pull goes back to the
    device whole, or with ordered pulls range by range as the next forward's
    hooks find them landed (the rest at the next step or wait()). Forced on a
    CPU model (dt._STAGE_CPU) the same code runs here: it must end bit for bit
    where the buckets pushed in place end, with dense and Top-k pushes, whole
    and ordered pulls, an unused layer (which no forward hook copies),
    state_dict() and finish(); a non-finite gradient is raised at step(). On a
    GPU, test_torch.py's CudaModel runs it on the device."""

    def setUp(self):
        import dcps.torch as dt

        dt._STAGE_CPU = True
        self.addCleanup(setattr, dt, "_STAGE_CPU", False)

    def test_staged_buckets_end_where_buckets_in_place_end(self):
        import dcps.torch as dt

        data = batches()
        for mode, comp, ordered in (("sync", {}, False), ("sync", {}, True),
                                    ("async", {"push": "topk", "density": 0.05}, False),
                                    ("async", {"push": "topk", "density": 0.05}, True)):
            out = {}
            for staged in (False, True):
                dt._STAGE_CPU = staged
                # weight decay moves the layer the forward does not call, which
                # only the rest of an ordered pull (land_rest) takes to the model
                j = harness.Job(harness.job_text(
                    shards=2, workers=1, job={"mode": mode},
                    model={"layers": None, "params": "auto"},
                    optimizer={"kind": "sgd", "lr": LR, "weight_decay": 0.5},
                    compression=comp), shards=2)
                try:
                    flat, exact, w = train(j, mlp(unused=True), data, bucket_mb=0.0007,
                                           ordered_pull=ordered)
                    self.assertEqual(w._staging is not None, staged)
                    out[staged] = flat, exact
                finally:
                    j.close()
            with self.subTest(mode=mode, ordered=ordered, **comp):
                m = mlp(unused=True)
                init = torch_cat_init_of(m)
                moved = (out[True][0] - init).abs().max().item()
                self.assertGreater(moved, 1e-3, "training did not move the model")
                lo = sum(p.numel() for p in (m.a.weight, m.a.bias, m.b.weight, m.b.bias))
                hi = lo + m.idle.weight.numel() + m.idle.bias.numel()
                if not comp:  # dense: the decay reached the idle layer
                    self.assertFalse(bool((out[True][0][lo:hi] == init[lo:hi]).all()))
                for k, what in enumerate(("pulled", "state_dict")):
                    self.assertTrue(bool((out[True][k] == out[False][k]).all()),
                                    f"staged vs in place, {what}")

    def test_staged_finish_and_a_nonfinite_gradient(self):
        import io

        import dcps
        import dcps.torch as dt

        j = job()
        try:
            m = mlp()
            w = dt.Worker(m, job=j.path, rank=0, overrides=[j.shards], bucket_mb=0.0007)
            x, y = batches(1)[0]
            loss_of(m, x, y).backward()
            w.step()
            pulled = torch_cat_init_of(m)
            final = w.finish(out=io.StringIO())
            self.assertEqual(final["steps"], 1)
            after = torch_cat_init_of(m)
            self.assertTrue(bool((after == pulled).all()), "finish()'s exact pull in the model")
        finally:
            j.close()
        j = job()
        try:
            m = mlp()
            w = dt.Worker(m, job=j.path, rank=0, overrides=[j.shards], bucket_mb=0.0007)
            m.b.weight.register_hook(lambda g: g * float("inf"))
            x, y = batches(1)[0]
            loss_of(m, x, y).backward()  # the pushing thread meets it
            with self.assertRaisesRegex(dcps.NonFiniteError, "b.weight"):
                w.step()
            w.close()
        finally:
            j.close()


def torch_cat_init_of(model):
    """The model's parameters now, as one tensor."""
    import torch

    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def torch_cat_init():
    return torch_cat_init_of(mlp())


if __name__ == "__main__":
    harness.main(need_data=False)
