#!/usr/bin/env python3
"""docs/protocol.md section 17 (parts) against real shards, through the second
client (dcps_proto.py): pushes in parts in async, ssp and sync mode (one and two
shards) give the parameters, bit for bit, that numpy's float32 arithmetic gives
for the same push sent whole; a retried part is applied once, a missing part
sent again later is taken, a push cut between its parts by a new session of
the rank is completed by that session's push of the step over the rest only
(every parameter takes one gradient of the step), a shard restarted from its
checkpoint between the parts of a push answers their retries as before (a sync
round too, whose checkpoint holds the open round; with several shards every
shard starts the open round again and each rank goes back to it), a sync round
waits for a rank's last part and goes on
without the rank once it is declared dead; pull replies in parts hold the
parameters of a whole reply; parts in shorter formats (section 18, each its
own, INT8 blocks from the part's first value) are applied (async) and summed
(sync) as what numpy decodes; malformed parts are refused FIELD with the
sentence section 17 gives (SIZE, FRAMELEN for an fp16 part of the wrong
length), and the shard keeps serving. Exits 77 as
test_protocol.py does."""
import os
import re
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from test_protocol import Case, F32, LR, N, P, gradient, np, pb, rng  # noqa: E402


def split(n, parts):
    return [n * i // parts for i in range(parts + 1)]


def reply_to(c, seq, ms):
    """The reply to c's request seq within ms, or None; c sends a HEARTBEAT every
    200 ms meanwhile, as a client whose request waits does (section 8)."""
    until, beat = time.monotonic() + ms / 1000, 0.0
    while time.monotonic() < until:
        if time.monotonic() - beat > 0.2:
            c.send(pb.HEARTBEAT)
            beat = time.monotonic()
        r = c.recv(50)
        if r is not None and r.h.seq == seq and r.type != pb.HEARTBEAT:
            return r
    return None


class Parts(Case):
    def job(self, shards=1, **sections):
        self.start(shards=shards, workers=2, **sections)
        w0 = gradient(rng(1), N, 0.01) + F32(1)
        a = self.joined(0, 0, init=w0)
        return a, w0

    def test_async_dense_parts_equal_the_whole_push_bit_for_bit(self):
        a, w = self.job()
        g1, g2 = gradient(rng(2), N), gradient(rng(3), N)
        self.assertEqual(a.push(0, 0, g=g1).h.flags, 0)  # whole
        w = w - F32(LR) * g1
        acks = a.push_parts(1, 1, g2, split(N, 5), 0)
        self.assertEqual(sorted(acks), [0, 1, 2, 3, 4])
        self.assertTrue(all(r.type == pb.PUSH_ACK and r.h.flags == 0 for r in acks.values()))
        w = w - F32(LR) * g2
        got, version = self.params(a, 2)
        self.assertEqual(version, 2)  # one version per push, in parts or not
        np.testing.assert_array_equal(got, w)
        # The reply in parts holds the same bytes as the whole one.
        parts, replies = a.pull_parts(2, 7, 0, N)
        self.assertEqual([r.h.part for r in replies], list(range(7)))
        self.assertEqual({r.h.param_version for r in replies}, {2})
        np.testing.assert_array_equal(parts, w)

    def test_another_ranks_push_between_parts_is_applied_between_them(self):
        a, w = self.job()
        b = self.joined(1, 0)
        g0, g1 = gradient(rng(7), N), gradient(rng(8), N)
        bounds = split(N, 3)
        base = a.seq
        a.push_parts(0, 0, g0, bounds, 0, order=[0, 1])
        self.assertEqual(b.push(0, 0, g=g1).h.param_version, 1)  # lands between the parts
        a.push_parts(0, 0, g0, bounds, 0, order=[2], seq=base)
        # Each parameter took the two pushes in the order they reached it.
        first = slice(0, bounds[2])
        w[first] = (w[first] - F32(LR) * g0[first]) - F32(LR) * g1[first]
        last = slice(bounds[2], N)
        w[last] = (w[last] - F32(LR) * g1[last]) - F32(LR) * g0[last]
        got, version = self.params(a, 1)
        self.assertEqual(version, 2)
        np.testing.assert_array_equal(got, w)

    def test_momentum_parts_bit_for_bit(self):
        a, w = self.job(optimizer={"kind": "momentum", "lr": LR, "momentum": 0.9})
        u = np.zeros(N, F32)
        for step in range(3):
            g = gradient(rng(10 + step), N)
            a.push_parts(step, step, g, split(N, 3), 0)
            u = F32(0.9) * u + g
            w = w - F32(LR) * u
        got, version = self.params(a, 3)
        self.assertEqual(version, 3)
        np.testing.assert_array_equal(got, w)

    def test_ssp_parts_move_the_clock_once_all_came(self):
        self.start(shards=1, workers=2, job={"mode": "ssp", "staleness": 0})
        a = self.joined(0, 0, init=np.ones(N, F32))
        b = self.joined(1, 0)
        g = gradient(rng(4), N)
        b.push_parts(0, 0, g, split(N, 2), 0, order=[0])  # part 1 is held back
        a.push(0, 0, g=g)
        # Rank 0's step 1 waits for rank 1's step 0, which one part does not complete.
        seq = a.send(pb.PULL, step=1)
        self.assertIsNone(reply_to(a, seq, 500))
        b.push_parts(0, 0, g, split(N, 2), 0, order=[1], seq=b.seq - 2)
        r = reply_to(a, seq, 2000)
        self.assertEqual((r.type, r.h.seq), (pb.PULL_REPLY, seq))
        np.testing.assert_array_equal(r.arrays[0], np.ones(N, F32) - F32(LR) * g - F32(LR) * g)

    def test_retried_and_missing_parts_are_applied_once(self):
        a, w = self.job()
        g = gradient(rng(5), N)
        b = split(N, 4)
        base = a.seq
        acks = a.push_parts(0, 0, g, b, 0, order=[0, 2, 3])  # part 1 lost
        self.assertEqual(sorted(acks), [0, 2, 3])
        _, version = self.params(a, 0)
        self.assertEqual(version, 0)  # the push is not complete
        again = a.push_parts(0, 0, g, b, 0, order=[2], seq=base)  # a retry
        self.assertEqual(again[2].h.flags, pb.FLAG_DUPLICATE)
        late = a.push_parts(0, 0, g, b, 0, order=[1], seq=base)  # below the last seq
        self.assertEqual(late[1].h.flags, 0)
        for i in range(4):  # after the push completed, every retry is a duplicate
            r = a.push_parts(0, 0, g, b, 0, order=[i], seq=base)[i]
            self.assertEqual(r.h.flags, pb.FLAG_DUPLICATE)
        got, version = self.params(a, 1)
        self.assertEqual(version, 1)
        np.testing.assert_array_equal(got, w - F32(LR) * g)

    def next_session(self, old, step):
        """Rank 0's old session says BYE (a worker killed and started again: the
        shard takes a silent one the same way), a new one says HELLO: its
        WELCOME's step is `step`, the step whose push in parts was cut."""
        self.assertEqual(old.bye().type, pb.BYE)
        c = self.conn(0)
        w = c.hello(0, N)
        self.assertEqual((w.type, w.h.step), (pb.WELCOME, step))
        return c

    def test_a_push_cut_between_parts_is_completed_by_the_next_session_once(self):
        a, w = self.job()
        g = [gradient(rng(20 + i), N) for i in range(3)]
        four, three = split(N, 4), split(N, 3)
        a.push_parts(0, 0, g[0], four, 0, order=[0, 2])  # cut: parts 1 and 3 never come
        b = self.next_session(a, 0)
        got, version = self.params(b, 0)  # parts of an incomplete push are not pulled
        self.assertEqual(version, 0)
        np.testing.assert_array_equal(got, w)
        b.push_parts(0, 0, g[1], three, 0, order=[0])  # cut again, another layout
        c = self.next_session(b, 0)
        ack = c.push(0, 0, g=g[2])  # the step again, whole
        self.assertEqual((ack.h.flags, ack.h.param_version), (0, 1))
        # Every parameter took one gradient of step 0: the first that reached it.
        took = np.full(N, 2)
        took[four[0]:four[1]] = took[four[2]:four[3]] = 0
        took[four[1]:three[1]] = 1
        want = w - F32(LR) * np.choose(took, g)
        got, version = self.params(c, 1)
        self.assertEqual(version, 1)
        np.testing.assert_array_equal(got, want)
        self.assertEqual(c.push(0, 0, g=g[2]).h.flags, pb.FLAG_DUPLICATE)  # step 0 is done
        # A sparse push completing a cut one takes its entries outside the parts that came.
        c.push_parts(1, 1, g[0], three, 0, order=[1])
        d = self.next_session(c, 1)
        idx = np.arange(0, N, 7, dtype=np.uint32)
        vals = gradient(rng(30), len(idx))
        self.assertEqual(d.push(1, 1, idx=idx, values=vals).h.param_version, 2)
        want[three[1]:three[2]] -= F32(LR) * g[0][three[1]:three[2]]
        out = (idx < three[1]) | (idx >= three[2])
        want[idx[out]] -= F32(LR) * vals[out]
        got, version = self.params(d, 2)
        self.assertEqual(version, 2)
        np.testing.assert_array_equal(got, want)

    def test_a_shard_restarted_between_parts_answers_their_retries_as_before(self):
        job = self.start(shards=1, workers=2, optimizer={"kind": "momentum", "lr": LR,
                                                         "momentum": 0.9},
                         server={"checkpoint_dir": "@DIR@", "checkpoint_every": 3600})
        w = gradient(rng(1), N, 0.01) + F32(1)
        a = self.joined(0, 0, init=w)
        self.joined(1, 0)
        g, bounds = gradient(rng(2), N), split(N, 3)
        base = a.seq
        a.push_parts(0, 0, g, bounds, 0, order=[1, 0])
        job.restart(0)  # SIGTERM: its checkpoint falls between the parts
        # The client sends every part again, not knowing which came: those that
        # came are DUPLICATE, the last one completes the push.
        for i, flags in ((0, pb.FLAG_DUPLICATE), (1, pb.FLAG_DUPLICATE), (2, 0)):
            r = a.push_parts(0, 0, g, bounds, 0, order=[i], seq=base)[i]
            self.assertEqual((r.type, r.h.flags), (pb.PUSH_ACK, flags), r.h.error_text)
        got, version = self.params(a, 1)
        self.assertEqual(version, 1)
        np.testing.assert_array_equal(got, w - F32(LR) * g)  # momentum's first step: u = g

    def test_a_sync_round_cut_by_its_shard_restarting_ends_as_if_whole(self):
        job = self.start(shards=1, workers=2, job={"mode": "sync"},
                         server={"checkpoint_dir": "@DIR@", "checkpoint_every": 3600})
        w = gradient(rng(1), N, 0.01) + F32(1)
        a = self.joined(0, 0, init=w)
        b = self.joined(1, 0)
        ga, gb, bounds = gradient(rng(2), N), gradient(rng(3), N), split(N, 3)
        base = a.seq
        a.push_parts(0, 0, ga, bounds, 0, order=[0, 1])
        b.push(0, 0, g=gb)
        job.restart(0)  # the checkpoint holds the open round: b's push, a's two parts
        for i, flags in ((0, pb.FLAG_DUPLICATE), (1, pb.FLAG_DUPLICATE), (2, 0)):
            r = a.push_parts(0, 0, ga, bounds, 0, order=[i], seq=base)[i]
            self.assertEqual((r.type, r.h.flags), (pb.PUSH_ACK, flags), r.h.error_text)
        got, version = self.params(a, 1)
        self.assertEqual(version, 1)
        np.testing.assert_array_equal(got, w - F32(LR) * ((ga + gb) / F32(2)))

    def test_a_sync_job_restored_mid_round_starts_the_round_again_everywhere(self):
        """Shard 0 of 2 stopped (SIGTERM) in the middle of round 2, after a's
        first two parts of 3 there and b's pushes: its checkpoint holds them,
        shard 1's (periodic, at round 2's start) does not. Every shard starts
        round 2 again empty; each rank is sent back to it and pushes it again."""
        job = self.start(shards=2, workers=2, job={"mode": "sync"},
                         server={"checkpoint_dir": "@DIR@", "checkpoint_every": 1})
        w = gradient(rng(1), N, 0.01) + F32(1)
        a = [self.joined(0, s, init=w) for s in range(2)]
        b = [self.joined(1, s) for s in range(2)]
        halves = [slice(0, 512), slice(512, N)]
        def round_of(step, ga, gb, parts=None):
            for s, h in enumerate(halves):
                if s == 0 and parts:
                    a[0].push_parts(step, step, ga[h], split(512, parts), 0)
                else:
                    self.assertEqual(a[s].push(step, step, g=ga[h]).h.flags, 0)
                self.assertEqual(b[s].push(step, step, g=gb[h]).h.flags, 0)
            return w - F32(LR) * ((ga + gb) / F32(2))
        for step in range(2):
            w = round_of(step, gradient(rng(10 + step), N), gradient(rng(20 + step), N))
            for s in range(2):
                a[s].pull(step + 1), b[s].pull(step + 1)
            time.sleep(1.2)  # a periodic checkpoint after the next round, on both shards
        ga, gb = gradient(rng(30), N), gradient(rng(31), N)
        base, bseq = a[0].seq, b[0].seq
        a[0].push_parts(2, 2, ga[:512], split(512, 3), 0, order=[0, 1])
        a[1].push(2, 2, g=ga[512:])
        for s, h in enumerate(halves):
            b[s].push(2, 2, g=gb[h])
        job.restart(0)
        # a's parts that came are taken out of the round: STALE with round 2.
        for i in range(3):
            r = a[0].push_parts(2, 2, ga[:512], split(512, 3), 0, order=[i], seq=base)[i]
            self.assertEqual((r.type, r.h.flags, r.h.step), (pb.PUSH_ACK, pb.FLAG_STALE, 2))
        # b's push is the one shard 0's checkpoint held (DUPLICATE), but a pull
        # of a later step sends b back to round 2.
        self.assertEqual(b[0].push(2, 2, g=gb[:512], seq=bseq).h.flags, pb.FLAG_DUPLICATE)
        early = b[0].seq
        b[0].seq += 1
        r = b[0].pull(3)
        self.assertEqual((r.h.flags, r.h.step), (pb.FLAG_STALE, 2))
        # A push b sent before that pull (a retry that comes late, say) is from
        # before the restore: sent back too.
        r = b[0].push(2, 2, g=gb[:512], seq=early)
        self.assertEqual((r.h.flags, r.h.step), (pb.FLAG_STALE, 2))
        for s in range(2):
            a[s].pull(2), b[s].pull(2)
        w = round_of(2, ga, gb, parts=2)
        got = np.concatenate([a[s].pull(3).arrays[0] for s in range(2)])
        np.testing.assert_array_equal(got, w)

    def test_parts_sent_before_the_first_pull_from_a_restored_shard_come_from_behind(self):
        """A push sent before the shard went down and retried after the rank's
        pull from the restored shard (a step in ranges pulls ahead of its
        push's acknowledgements) names the previous process's version: taken
        as computed on the current one, not refused VERSION."""
        job = self.start(shards=1, workers=2,
                         server={"checkpoint_dir": "@DIR@", "checkpoint_every": 1})
        w = gradient(rng(1), N, 0.01) + F32(1)
        a = self.joined(0, 0, init=w)
        self.joined(1, 0)
        a.push(0, 0, g=gradient(rng(2), N))
        time.sleep(1.3)  # a periodic checkpoint of version 1
        for step in (1, 2):
            a.push(step, step, g=gradient(rng(2 + step), N))
        job.restart(0, signal.SIGKILL)  # back to version 1: versions 2 and 3 are lost
        base = a.seq
        a.seq += 3  # the push's seqs, below its pull's
        r = a.pull(4)
        self.assertEqual(r.h.param_version, 1)
        acks = a.push_parts(3, 3, gradient(rng(9), N), split(N, 3), 0, seq=base)
        self.assertEqual([(acks[i].type, acks[i].h.flags) for i in range(3)],
                         [(pb.PUSH_ACK, 0)] * 3, acks[0].h.error_text)
        self.assertEqual(self.params(a, 4)[1], 2)

    def test_malformed_parts_are_refused_and_the_shard_serves_on(self):
        a, w = self.job()
        g = gradient(rng(6), N)

        def part(i, n, lo, hi, values=None, **kw):
            v = g[lo:hi] if values is None else values
            return a.request(pb.PUSH, P.dense(v), check=False, step=0, param_version=0, part=i,
                             parts=n, part_lo=lo, part_hi=hi, **kw)

        self.assertError(part(0, 65, 0, 10), "FIELD",
                         "PUSH in 65 parts: a push or reply has 1 to 64 parts")
        self.assertError(part(3, 3, 0, 10), "FIELD", "PUSH part 3 of 3: parts are numbered 0 to 2")
        self.assertError(part(0, 2, 0, N + 1, values=np.zeros(N + 1, F32)), "FIELD",
                         f"PUSH part 0 covers [0, {N + 1}), not a nonempty range inside the "
                         f"shard's [0, {N})")
        self.assertError(part(0, 2, 5, 5, values=np.zeros(0, F32)), "FIELD",
                         f"PUSH part 0 covers [5, 5), not a nonempty range inside the shard's "
                         f"[0, {N})")
        self.assertError(part(0, 2, 0, 10, values=np.zeros(9, F32)), "SIZE",
                         re.compile(r"dense frame of 9 elements, .*10"))
        base = a.seq
        self.assertEqual(part(0, 3, 0, 400).type, pb.PUSH_ACK)
        self.assertError(a.request(pb.PUSH, P.dense(g[300:600]), seq=base + 1, check=False,
                                   step=0, param_version=0, part=1, parts=3, part_lo=300,
                                   part_hi=600), "FIELD",
                         "part 1 covers [300, 600), which overlaps part 0's [0, 400)")
        self.assertError(a.request(pb.PUSH, P.dense(g[400:600]), seq=base + 1, check=False,
                                   step=0, param_version=0, part=1, parts=4, part_lo=400,
                                   part_hi=600), "FIELD",
                         f"seq {base + 1} is part 1 of the push of step 0 in 3 dense parts from "
                         f"seq {base}, this message says part 1 of 4 of step 0, dense")
        self.assertError(a.request(pb.PUSH, P.dense(g[400:600]), seq=base + 2, check=False,
                                   step=0, param_version=0, part=1, parts=3, part_lo=400,
                                   part_hi=600), "FIELD",
                         f"seq {base + 2} is part 2 of the push of step 0 in 3 dense parts from "
                         f"seq {base}, this message says part 1 of 3 of step 0, dense")
        self.assertEqual(a.request(pb.PUSH, P.dense(g[400:600]), seq=base + 1, step=0,
                                   param_version=0, part=1, parts=3, part_lo=400,
                                   part_hi=600).type, pb.PUSH_ACK)
        self.assertError(a.request(pb.PUSH, P.dense(g[600:900]), seq=base + 2, check=False,
                                   step=0, param_version=0, part=2, parts=3, part_lo=600,
                                   part_hi=900), "FIELD",
                         f"the 3 parts of the push from seq {base} cover 900 of the shard's "
                         f"{N} parameters")
        # Parts on other requests, and a PULL's.
        self.assertError(a.request(pb.HEARTBEAT, check=False, part=0, parts=2), "FIELD",
                         "HEARTBEAT carries part fields: only PUSH, PULL and PULL_REPLY have "
                         "parts")
        self.assertError(a.request(pb.PULL, check=False, step=0, parts=0, part_hi=1), "FIELD",
                         "PULL in 0 parts: a push or reply has 1 to 64 parts")
        self.assertError(a.request(pb.PULL, check=False, step=0, parts=2, part_lo=3), "FIELD",
                         "PULL with part 0 [3, 0): a PULL only asks for its reply in `parts` "
                         "parts")
        # The last part, right: the push completes; another rank was served all along.
        self.assertEqual(a.request(pb.PUSH, P.dense(g[600:N]), seq=base + 2, step=0,
                                   param_version=0, part=2, parts=3, part_lo=600,
                                   part_hi=N).h.flags, 0)
        got, version = self.params(a, 1)
        self.assertEqual(version, 1)
        np.testing.assert_array_equal(got, w - F32(LR) * g)

    def test_parts_in_shorter_formats_are_decoded_over_their_own_range(self):
        # Async: each part in its own format, INT8's blocks counted from the
        # part's first value; the shard applies what the part decodes to.
        a, w = self.job()
        g = gradient(rng(8), N)
        bounds, fmts = [0, 100, 300, N], [("fp16",), ("int8", 64), ("bf16",)]
        acks = a.push_parts(0, 0, g, bounds, 0, order=[2, 0, 1], fmts=fmts)
        self.assertTrue(all(r.type == pb.PUSH_ACK and r.h.flags == 0 for r in acks.values()))
        dec = np.concatenate([P.encode(g[lo:hi], *f)[1]
                              for lo, hi, f in zip(bounds, bounds[1:], fmts)])
        got, version = self.params(a, 1)
        self.assertEqual(version, 1)
        np.testing.assert_array_equal(got, w - F32(LR) * dec)
        # A part in fp16 whose length is not its range's is refused, and one
        # whose bytes are not its count's; nothing of either is applied.
        fp16 = [P.values_frame(pb.FRAME_DENSE, g[:9], "fp16")]
        self.assertError(a.request(pb.PUSH, fp16, check=False, step=1, param_version=1, part=0,
                                   parts=2, part_lo=0, part_hi=10), "SIZE",
                         re.compile(r"dense frame of 9 elements, .*10"))
        short = [(dict(kind=pb.FRAME_DENSE, dtype=4, count=10, bytes=19), bytes(19))]
        self.assertError(a.request(pb.PUSH, short, check=False, step=1, param_version=1, part=0,
                                   parts=2, part_lo=0, part_hi=10), "FRAMELEN",
                         "frame 0: header says 10 elements in 19 bytes, frame has 19 bytes")
        np.testing.assert_array_equal(self.params(a, 1)[0], got)

    def sync_two(self, seed):
        """A sync job of two shards and two ranks, rank 1's push of step 0 sent
        whole; returns the workers, the initial parameters and both gradients."""
        self.start(shards=2, workers=2, job={"mode": "sync"})
        w0 = np.full(N, 0.5, F32)
        ws = [self.worker(r) for r in range(2)]
        for w in ws:
            w.hello()
        ws[0].init(w0)
        g = [gradient(rng(seed + r), N) for r in range(2)]
        for s, (lo, hi) in enumerate(ws[0].ranges):
            ws[1].conns[s].push(0, 0, g=g[1][lo:hi])
        return ws, w0, g

    def assertRoundApplied(self, ws, w0, mean):
        """Round 0 closed on every shard: its parameters, pulled in 4 parts, are
        w0 - lr · mean at version 1."""
        for s, (lo, hi) in enumerate(ws[0].ranges):
            vals, replies = ws[0].conns[s].pull_parts(1, 4, lo, hi)
            self.assertEqual(replies[0].h.param_version, 1)
            np.testing.assert_array_equal(vals, w0[lo:hi] - F32(LR) * mean[lo:hi])

    def test_sync_parts_in_shorter_formats_add_their_decoded_values(self):
        ws, w0, g = self.sync_two(30)
        dec = [np.empty(N, F32), g[1]]
        for s, (lo, hi) in enumerate(ws[0].ranges):
            b, fmts = split(hi - lo, 3), [("int8", 64), ("fp16",), ("twobit", 0, 0.01)]
            ws[0].conns[s].push_parts(0, 0, g[0][lo:hi], b, lo, fmts=fmts)
            for (a, z), f in zip(zip(b, b[1:]), fmts):
                dec[0][lo + a:lo + z] = P.encode(g[0][lo + a:lo + z], *f)[1]
        self.assertRoundApplied(ws, w0, (dec[0] + dec[1]) * F32(0.5))

    def test_sync_round_closes_on_complete_pushes_two_shards(self):
        ws, w0, g = self.sync_two(20)
        for s, (lo, hi) in enumerate(ws[0].ranges):
            c = ws[0].conns[s]
            c.push_parts(0, 0, g[0][lo:hi], split(hi - lo, 3), lo)
        self.assertRoundApplied(ws, w0, (g[0] + g[1]) * F32(0.5))

    def test_sync_round_waits_for_the_last_part_then_goes_on_without_a_dead_rank(self):
        self.start_sync_alone(server={"heartbeat_ms": 100, "dead_after_ms": 800})
        n = self.n_params
        w0 = np.full(n, 0.25, F32)
        a = self.joined(0, 0, init=w0)
        b = self.joined(1, 0)
        g0, g1 = gradient(rng(30), n), gradient(rng(31), n)
        bounds = split(n, 3)
        base = b.seq
        b.push_parts(0, 0, g1, bounds, 0, order=[0, 1])  # part 2 never comes
        self.assertEqual(a.push(0, 0, g=g0).h.flags, 0)
        seq = a.send(pb.PULL, step=1)
        t0 = time.monotonic()
        r = reply_to(a, seq, 5000)
        waited = time.monotonic() - t0
        self.assertEqual((r.type, r.h.seq, r.h.param_version), (pb.PULL_REPLY, seq, 1))
        self.assertGreater(waited, 0.5)  # the round waited for rank 1 until it was dead
        # Rank 1's two parts were taken back out: the round is rank 0's push alone,
        # but for the rounding of adding them to the sum and subtracting them again.
        acc = g0.copy()
        acc[:bounds[2]] = (g1[:bounds[2]] + g0[:bounds[2]]) - g1[:bounds[2]]
        np.testing.assert_array_equal(r.arrays[0], w0 - F32(LR) * (acc * F32(1.0)))
        # Its last part now comes for a closed round: STALE, and so is a retry of a part
        # that was taken back out.
        late = b.push_parts(0, 0, g1, bounds, 0, order=[2], seq=base)[2]
        self.assertEqual((late.h.flags, late.h.step), (pb.FLAG_STALE, 1))
        again = b.push_parts(0, 0, g1, bounds, 0, order=[0], seq=base)[0]
        self.assertEqual(again.h.flags, pb.FLAG_STALE)


if __name__ == "__main__":
    unittest.main()
