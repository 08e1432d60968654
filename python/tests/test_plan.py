"""python3 -m dcps.plan: bad arguments are refused naming the option; the table
has a row per shard count with its prediction; more shards never predict less
than the link and CPU bounds allow and the recommendation is the fewest shards
within 5% of the best; a dense job on a slow link is bound by the shards' links
(worked out by hand); Top-k + delta moves fewer bytes and runs faster."""
import os
import subprocess
import sys
import unittest

from dcps import plan


def run(*args):
    env = dict(os.environ)
    p = subprocess.run([sys.executable, "-m", "dcps.plan", *args], capture_output=True,
                       text=True, env=env, timeout=300)
    return p.returncode, p.stdout, p.stderr


def table(out):
    lines = [l for l in out.splitlines() if l and not l.startswith("#")]
    head = lines[0].split(",")
    return [dict(zip(head, l.split(","))) for l in lines[1:]]


class Arguments(unittest.TestCase):
    def test_bad_values_are_refused_by_name(self):
        base = ["--params", "1000000", "--workers", "4", "--link", "10gbit", "--step-ms", "50"]
        cases = [
            (["--params", "10"], "--params: 10 is outside 64"),
            (["--workers", "zero"], "--workers: 'zero' is not a whole number"),
            (["--link", "fast"], "--link: 'fast' is not a rate"),
            (["--link", "5000gbit"], "outside 1mbit to 1000gbit"),
            (["--step-ms", "0"], "--step-ms: 0 is outside (0"),
            (["--density", "1.5"], "--density: 1.5 is outside"),
            (["--rule", "lion"], "invalid choice: 'lion'"),
        ]
        for extra, text in cases:
            args = list(base)
            for i in range(0, len(extra), 2):
                if extra[i] in args:
                    args[args.index(extra[i]) + 1] = extra[i + 1]
                else:
                    args += extra[i:i + 2]
            rc, out, err = run(*args)
            self.assertEqual(rc, 2, f"{extra}: {out}{err}")
            self.assertIn(text, err, extra)
        rc, _, err = run("--workers", "4", "--link", "1gbit", "--step-ms", "5")
        self.assertEqual(rc, 2)
        self.assertIn("--params", err)

    def test_link_spellings(self):
        self.assertEqual(plan.parse_link("10gbit"), 1e10)
        self.assertEqual(plan.parse_link("25Gbit"), 25e9)
        self.assertEqual(plan.parse_link("100mbit"), 1e8)
        self.assertEqual(plan.parse_link("1000000000"), 1e9)
        for bad in ("10 gigs", "", "-1gbit", "1e9x"):
            with self.assertRaises(ValueError):
                plan.parse_link(bad)


class Predictions(unittest.TestCase):
    def test_dense_on_a_slow_link_is_bound_by_the_shards_links(self):
        # 8 workers, 4M parameters, 100 Mbit/s: every step moves 16 MB up and 16 MB
        # down through the shards' links; with S shards they carry 8 * 16 MB / S
        # each way per round of steps, so throughput grows with S until the
        # workers' own links (16 MB each way per step) bound it.
        rc, out, err = run("--params", "4194304", "--workers", "8", "--link", "100mbit",
                           "--step-ms", "1", "--max-shards", "8", "--rule", "sgd")
        self.assertEqual(rc, 0, err)
        rows = table(out)
        self.assertEqual([int(r["shards"]) for r in rows], [1, 2, 4, 8])
        rate = [float(r["samples_per_s"]) for r in rows]
        B = 100e6 / 8
        worker_bound = 8 * 64 / (2 * 4 * 4194304 / B)  # a worker's link, both ways
        shard_bound_1 = 64 / (4 * 4194304 / B)  # one shard's downlink takes every push
        self.assertLessEqual(rate[0], shard_bound_1 * 1.02)
        self.assertGreater(rate[0], shard_bound_1 * 0.85)
        for r in rate:
            self.assertLessEqual(r, worker_bound * 1.02)
        self.assertGreater(rate[-1], rate[0] * 3)
        pick = int(out.split("# recommended: ")[1].split()[0])
        best = max(rate)
        self.assertEqual(pick, min(int(r["shards"]) for r in rows
                                   if float(r["samples_per_s"]) >= 0.95 * best))

    def test_topk_delta_beats_dense_where_links_bind(self):
        args = ["--params", "25600000", "--workers", "16", "--link", "1gbit", "--step-ms", "100",
                "--shards", "4"]
        rc, dense, err = run(*args)
        self.assertEqual(rc, 0, err)
        rc, topk, err = run(*args, "--density", "0.001")
        self.assertEqual(rc, 0, err)
        d, t = table(dense)[0], table(topk)[0]
        self.assertGreater(float(t["samples_per_s"]), 5 * float(d["samples_per_s"]))
        self.assertLessEqual(float(t["efficiency"]), 1.0)


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False).result.wasSuccessful() else 1)
