#!/usr/bin/env python3
"""Parameter groups through dcps.torch with real shards: AdamW with the usual
decay / no-decay split (dcps.torch.decay_groups) in sync mode, one worker,
dense pushes, equals torch.optim.AdamW with the same groups to float32
rounding; a table that does not cover the model, or a group option dcps
cannot honour, is refused before anything is sent; a second rank whose
groups differ from rank 0's is refused with a sentence naming the group."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

STEPS = 40
LR = 0.01


def make_model(seed=1):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16),
                               torch.nn.ReLU(), torch.nn.Linear(16, 4))


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def groups_job(workers=1, shards=2, **optimizer):
    opt = {"kind": "adamw", "lr": LR, "weight_decay": 0.1}
    opt.update(optimizer)
    return harness.job_text(shards=shards, workers=workers, job={"mode": "sync"},
                            model={"layers": None, "params": "auto"}, optimizer=opt,
                            data={"epochs": 1},
                            server={"heartbeat_ms": 200, "dead_after_ms": 30000})


def batches(seed=7):
    import torch

    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(32, 8, generator=g), torch.randint(0, 4, (32,), generator=g))
            for _ in range(STEPS)]


def env(job, rank):
    os.environ.update(DCPS_JOB=job.path, DCPS_RANK=str(rank), DCPS_SET=job.shards)


class AdamWGroupsEqualTorch(unittest.TestCase):
    def test_decay_and_no_decay_groups_equal_torch_adamw(self):
        import torch
        import torch.nn.functional as F

        import dcps.torch as dt

        job = harness.Job(groups_job(), shards=2)
        try:
            env(job, 0)
            model, ref = make_model(), make_model()
            groups = dt.decay_groups(model)
            # The no-decay group also gets its own lr (a factor 0.5 of the job's).
            groups[1]["lr"] = LR / 2
            self.assertEqual([len(g["params"]) for g in groups], [2, 4])
            worker = dt.Worker(model, param_groups=groups)
            ref_groups = dt.decay_groups(ref, weight_decay=0.1)
            ref_groups[1]["lr"] = LR / 2
            opt = torch.optim.AdamW(ref_groups, lr=LR, foreach=False)
            data = batches()
            for x, y in data:
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                worker.step(loss)
                opt.zero_grad()
                F.cross_entropy(ref(x), y).backward()
                opt.step()
            got = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
            want = torch.cat([p.detach().reshape(-1) for p in ref.parameters()])
            init = torch.cat([p.detach().reshape(-1) for p in make_model().parameters()])
            worker.close()
            diff = (got - want).abs().max().item()
            scale = want.abs().max().item()
            moved = (want - init).abs().max().item()
            print(f"AdamW, 2 groups, {STEPS} steps: max |dcps - torch| = {diff:.3g} "
                  f"(max |w| {scale:.3g}, moved {moved:.3g})", file=sys.stderr)
            self.assertGreater(moved, 1e-2, "training did not move the model")
            # float32 rounding: at most 8 ulps of the largest parameter after 40 steps
            # (measured: 0.5 ulp)
            self.assertLessEqual(diff, 1e-6 * scale, f"dcps and torch differ by {diff}")
        finally:
            job.close()


class Refusals(unittest.TestCase):
    def test_a_table_that_misses_a_parameter_is_refused_naming_it(self):
        import dcps.torch as dt

        job = harness.Job(groups_job(shards=1), shards=1)
        try:
            env(job, 0)
            model = make_model()
            groups = dt.decay_groups(model)
            groups[1]["params"] = groups[1]["params"][1:]
            with self.assertRaises(ValueError) as cm:
                dt.Worker(model, param_groups=groups)
            self.assertIn("parameter 0.bias is in no group", str(cm.exception))
            dup = dt.decay_groups(model)
            dup[0]["params"].append(dup[1]["params"][0])
            with self.assertRaises(ValueError) as cm:
                dt.Worker(model, param_groups=dup)
            self.assertIn("parameter 0.bias is in param_groups[0] and param_groups[1]",
                          str(cm.exception))
        finally:
            job.close()

    def test_an_option_the_shards_apply_once_is_refused_unless_it_is_the_jobs(self):
        import dcps.torch as dt

        job = harness.Job(groups_job(shards=1), shards=1)
        try:
            env(job, 0)
            model = make_model()
            groups = dt.decay_groups(model)
            groups[1]["betas"] = (0.9, 0.95)
            with self.assertRaises(ValueError) as cm:
                dt.Worker(model, param_groups=groups)
            self.assertIn("param_groups[1] has betas = (0.9, 0.95), the job's is (0.9, 0.999)",
                          str(cm.exception))
        finally:
            job.close()

    def test_rank_1_with_other_groups_is_refused_naming_the_group(self):
        """Rank 1 says HELLO before rank 0 has initialised the shards; its
        groups are compared once rank 0's are there."""
        import dcps
        import dcps.torch as dt

        job = harness.Job(groups_job(workers=2), shards=2)
        try:
            # Rank 1 in a child process, started first: it waits for rank 0.
            code = (
                "import os, sys\n"
                f"sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
                "import test_groups as t, dcps, dcps.torch as dt\n"
                "m = t.make_model()\n"
                "g = dt.decay_groups(m, weight_decay=0.05)\n"
                "try:\n"
                "    dt.Worker(m, param_groups=g)\n"
                "except dcps.Error as e:\n"
                "    print('refused:', e)\n"
                "    sys.exit(3)\n")
            p = job.spawn(1, [sys.executable, "-c", code], tag="rank1")
            env(job, 0)
            model = make_model()
            worker = dt.Worker(model, param_groups=dt.decay_groups(model))
            self.assertEqual(job.wait(p, 120), 3, job.output("rank1", "err"))
            out = job.output("rank1")
            print(out.strip(), file=sys.stderr)
            self.assertIn("parameter group 0 differs from rank 0's: rank 1 gives it "
                          "weight_decay 0.050000000000000003, rank 0 gave "
                          "0.10000000000000001", out)
            worker.close()
        finally:
            job.close()


if __name__ == "__main__":
    harness.main(need_data=False)
