"""dcps.sim against answers worked out by hand: one worker's step is its compute
plus its transfers, a shared link divides its rate, a shard's CPU bounds the
throughput, shared cores share (with other work too), async staleness is P - 1, sync has none and ssp
stays within its bound, the CD-SGD pipeline hides the shorter of compute and
communication, and bad input is refused naming the field."""
import math
import sys
import unittest

from dcps.sim import Cluster, Costs, Job, message_bytes, shard_ranges, simulate

H = 48  # header bytes, Costs' default


class ClosedForm(unittest.TestCase):
    def test_one_worker_step_is_compute_plus_four_messages(self):
        n, bps, lat, c = 1_000_000, 1e9, 0.001, 0.05
        r = simulate(Job(params=n, workers=1, compute_s=c, steps=5),
                     Cluster(link_bps=bps, latency_s=lat))
        B = bps / 8
        # push 4n + H out, ack H back, pull request H out, reply 4n + H back.
        want = c + (4 * n + H) / B + H / B + H / B + (4 * n + H) / B + 4 * lat
        self.assertAlmostEqual(r.step_s, want, delta=want * 1e-9)
        self.assertAlmostEqual(r.samples_per_s, 64 / want, delta=1e-6 * 64 / want)

    def test_two_shards_split_the_worker_link(self):
        # Two shards: the worker's uplink carries both halves one after the other,
        # and the two shards' replies share its downlink: the same bytes as one
        # shard, one more header per message (the small ones overlap the halves).
        n, bps = 1 << 20, 1e9
        r = simulate(Job(params=n, workers=1, shards=2, compute_s=0.0, steps=3),
                     Cluster(link_bps=bps))
        B = bps / 8
        want = 2 * (4 * n + 2 * H) / B
        self.assertAlmostEqual(r.step_s, want, delta=want * 1e-4)

    def test_sync_shard_downlink_is_shared_by_every_worker(self):
        # P workers, one shard, no compute, sync: the shard's uplink sends the P
        # replies one after the other, and the worker served last pushes once its
        # reply is in; the others' pushes went in meanwhile (the other direction):
        # a round takes P + 1 transfers (headers aside), after the first.
        n, bps, P = 250_000, 1e9, 4
        r = simulate(Job(params=n, workers=P, mode="sync", compute_s=0.0, steps=60),
                     Cluster(link_bps=bps))
        B = bps / 8
        per_round = (P + 1) * (4 * n + H) / B
        self.assertAlmostEqual(r.step_s, per_round, delta=per_round * 0.01)
        self.assertGreater(r.link_util["s0.down"], 0.45)
        self.assertLess(r.link_util["w0.up"], 1.0 / P + 0.05)

    def test_shard_cpu_bounds_async_throughput(self):
        # Infinitely fast links and compute: a cycle costs the shard 1 ms of CPU
        # (0.6 push + 0.4 pull), so P workers together make 1000 cycles a second.
        costs = Costs(push_fixed=0.0006, pull_fixed=0.0004)
        for P in (1, 4, 16):
            r = simulate(Job(params=64, workers=P, compute_s=0.0, steps=50),
                         Cluster(link_bps=1e15), costs)
            self.assertAlmostEqual(r.samples_per_s, 64 * 1000, delta=64 * 1000 * 0.03,
                                   msg=f"P = {P}")
            self.assertGreater(r.shard_util[0], 0.97)

    def test_shared_cores_are_shared(self):
        # Four workers, each with 0.1 s of CPU a step and nothing else, on a pool
        # of 2 cores: a step takes 0.2 s; on hosts of their own, 0.1 s.
        job = dict(params=64, workers=4, compute_s=0.0, worker_cpu_s=0.1, steps=10)
        shared = simulate(Job(**job), Cluster(link_bps=1e15, shared_cores=2))
        own = simulate(Job(**job), Cluster(link_bps=1e15))
        self.assertAlmostEqual(shared.step_s, 0.2, delta=0.002)
        self.assertAlmostEqual(own.step_s, 0.1, delta=0.001)
        # Two threads of other work always runnable: six threads on 2 cores, a third
        # of a core each, 0.3 s a step; the job's own use of the pool is what it
        # reports (4 threads at a third of a core: 2/3 of the pool).
        loaded = simulate(Job(**job), Cluster(link_bps=1e15, shared_cores=2,
                                              background_threads=2))
        self.assertAlmostEqual(loaded.step_s, 0.3, delta=0.003)
        self.assertAlmostEqual(loaded.cpu_busy, 2 / 3, delta=0.02)

    def test_async_staleness_is_p_minus_one(self):
        # Workers whose steps take random times: between a worker's pull and its
        # push, which is nearly its whole cycle, the other P - 1 push once each on
        # average (lockstep workers would interleave differently).
        P = 6
        r = simulate(Job(params=64, workers=P, compute_s=0.01, compute_cv=0.3, steps=200),
                     Cluster(link_bps=1e12), Costs(push_fixed=1e-6, pull_fixed=1e-6))
        self.assertAlmostEqual(r.mean_staleness(), P - 1, delta=0.15)
        self.assertGreater(max(r.staleness), P - 1)  # a distribution, not a constant

    def test_sync_has_no_staleness_and_ssp_stays_in_its_bound(self):
        sync = simulate(Job(params=64, workers=4, mode="sync", compute_s=0.01,
                            compute_cv=0.5, steps=20), Cluster(link_bps=1e12))
        self.assertEqual(set(sync.staleness), {0})
        ssp = simulate(Job(params=64, workers=4, mode="ssp", staleness=2, compute_s=0.01,
                           compute_cv=0.8, steps=40), Cluster(link_bps=1e12))
        # A push of step t was computed on a pull of step t, which waited for every
        # other worker's step t - 1 - 2: at most (2 + 1) steps of the 3 others,
        # and its own none, are newer.
        self.assertLessEqual(max(ssp.staleness), 3 * 3 + 3)
        # The bound costs throughput against async under the same draws.
        asy = simulate(Job(params=64, workers=4, mode="async", compute_s=0.01,
                           compute_cv=0.8, steps=40), Cluster(link_bps=1e12))
        self.assertLessEqual(ssp.samples_per_s, asy.samples_per_s * 1.0001)
        self.assertLess(sync.samples_per_s, asy.samples_per_s)

    def test_pipeline_hides_the_shorter_of_compute_and_communication(self):
        n, bps = 1_000_000, 1e9
        comm = 2 * (4 * n + H) / (bps / 8) + 2 * H / (bps / 8)
        for c in (0.02, 0.1):
            job = dict(params=n, workers=1, compute_s=c, steps=30)
            plain = simulate(Job(**job), Cluster(link_bps=bps))
            piped = simulate(Job(pipeline=True, **job), Cluster(link_bps=bps))
            self.assertAlmostEqual(plain.step_s, c + comm, delta=(c + comm) * 1e-6)
            self.assertAlmostEqual(piped.step_s, max(c, comm), delta=max(c, comm) * 0.05)

    def test_sizes_are_libdcps_sizes(self):
        # bench/netem.sh measured 405,689 bytes per step for Top-k 0.1% + delta
        # pulls of the 25,330,442-parameter model on 2 shards (rank 0's pushes
        # and pulls, headers included), 202,643,869 dense.
        n = 25_330_442
        topk = message_bytes(Job(params=n, workers=1, shards=2, push="topk", pull="delta",
                                 density=0.001))
        dense = message_bytes(Job(params=n, workers=1, shards=2))
        self.assertAlmostEqual(sum(topk.values()), 405_689, delta=405_689 * 0.002)
        self.assertAlmostEqual(sum(dense.values()), 202_643_869, delta=202_643_869 * 0.0001)
        self.assertEqual(shard_ranges(1000, 2), [512, 488])  # docs/protocol.md's example
        self.assertEqual(sum(shard_ranges(n, 7)), n)

    def test_deterministic_for_a_seed(self):
        job = dict(params=64, workers=3, compute_s=0.01, compute_cv=0.4, steps=10)
        a = simulate(Job(seed=5, **job), Cluster(link_bps=1e9))
        b = simulate(Job(seed=5, **job), Cluster(link_bps=1e9))
        c = simulate(Job(seed=6, **job), Cluster(link_bps=1e9))
        self.assertEqual(a.samples_per_s, b.samples_per_s)
        self.assertNotEqual(a.samples_per_s, c.samples_per_s)

    def test_bad_values_are_refused_by_name(self):
        for job, name in ((Job(params=0, workers=1), "params"),
                          (Job(params=10, workers=1, mode="bsp"), "mode"),
                          (Job(params=10, workers=1, density=0), "density"),
                          (Job(params=10, workers=1, shards=11), "shards")):
            with self.assertRaisesRegex(ValueError, name):
                simulate(job, Cluster(link_bps=1e9))
        with self.assertRaisesRegex(ValueError, "link_bps"):
            simulate(Job(params=10, workers=1), Cluster(link_bps=0))
        self.assertTrue(math.isfinite(simulate(Job(params=10, workers=1),
                                               Cluster(link_bps=1e9)).step_s))


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False).result.wasSuccessful() else 1)
