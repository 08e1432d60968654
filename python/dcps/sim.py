"""dcps.sim: a discrete-event simulator of a dcps job.

What it models (bench/sim/README.md has the long form):

- **Workers**, one per host unless ``workers_per_host`` says more, each running the
  loop of ``dcps-worker`` / ``dcps.torch``: compute a step (a time drawn from a
  distribution: a GPU's time, or the sleep of ``--compute-ms``), the worker's own
  CPU work (error feedback, Top-k, encoding: ``worker_cpu_s``), a push to every
  shard, the acks, a pull from every shard (dense, or a delta), then the next step;
  with the CD-SGD pipeline the next step's compute overlaps this step's push and
  pull.
- **Hosts** with one NIC each: an uplink and a downlink of ``link_bps`` bits/s,
  shared by every transfer that crosses them (max-min fair, fluid), plus a one-way
  ``latency_s`` per message. Shards sit on hosts of their own (or share the
  workers' hosts: ``shards_on_workers``).
- **CPU**: each host has ``cores``; a process uses at most one (a shard's loop is
  one thread). ``shared_cores`` puts every process of the job on one pool of that
  many cores instead: the emulated-network runs of bench/netem.sh, where all
  namespaces share one machine.
- **Shards**: one loop each, handling messages one at a time in arrival order,
  each costing the CPU time that bench/shardcap measured (``Costs``). The job's
  mode: ``async`` (every push applied at once), ``sync`` (a pull of step t waits
  until every worker's push of step t - 1 is in), ``ssp`` (a pull of step t waits
  until the slowest worker has pushed step t - 1 - staleness).
- **Sizes** as libdcps encodes them: a dense push or pull of a shard's range is
  4 n_s bytes, a sparse push or a delta reply 8 k_s (uint32 index + float32 value),
  every message plus a header of ``header_bytes``.

It predicts (``Result``): the step time, samples/s, the staleness of every push (in
shard versions, as dcps_staleness counts it), each link's and each shard's
utilisation. Pure Python, no dependency; deterministic for a seed.
"""

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Dict, List, Optional

__all__ = ["Job", "Cluster", "Costs", "Result", "simulate", "message_bytes"]

INF = float("inf")


# --- what is simulated ---------------------------------------------------------------


@dataclass
class Job:
    """A dcps job: the model, the workers and the job file's choices."""

    params: int  # n, float32 parameters
    workers: int  # P
    shards: int = 1
    mode: str = "async"  # async, sync, ssp
    staleness: int = 4  # ssp bound
    push: str = "dense"  # dense, topk
    pull: str = "dense"  # dense, delta
    density: float = 0.01  # topk: k = ceil(density n)
    pull_density: float = 0.0  # delta: 0 means density
    batch: int = 64  # samples per step and worker
    compute_s: float = 0.05  # mean compute time per step
    compute_cv: float = 0.0  # its coefficient of variation (lognormal); 0: constant
    worker_cpu_s: float = 0.0  # the worker's CPU per step (EF, Top-k, encode, apply)
    steps: int = 20  # steps per worker
    pipeline: bool = False  # CD-SGD: compute of step t+1 overlaps push/pull of step t
    final_pull: bool = False  # a closing barrier and a dense pull (dcps-worker's end)
    seed: int = 1

    def check(self) -> None:
        """Raises ValueError naming the first field out of its range."""
        rules = [
            ("params", self.params >= 1),
            ("workers", self.workers >= 1),
            ("shards", 1 <= self.shards <= self.params),
            ("mode", self.mode in ("async", "sync", "ssp")),
            ("staleness", self.staleness >= 0),
            ("push", self.push in ("dense", "topk")),
            ("pull", self.pull in ("dense", "delta")),
            ("density", 0 < self.density <= 1),
            ("pull_density", 0 <= self.pull_density <= 1),
            ("batch", self.batch >= 1),
            ("compute_s", self.compute_s >= 0 and math.isfinite(self.compute_s)),
            ("compute_cv", self.compute_cv >= 0),
            ("worker_cpu_s", self.worker_cpu_s >= 0),
            ("steps", self.steps >= 1),
        ]
        for name, ok in rules:
            if not ok:
                raise ValueError(f"Job.{name} = {getattr(self, name)!r} is out of range")


@dataclass
class Cluster:
    """The machines: NICs, latency and cores."""

    link_bps: float  # each host's NIC, each direction, bits per second
    latency_s: float = 0.0  # one way, per message
    cores: int = 8  # per host
    shared_cores: float = 0  # > 0: every process on one pool of this many cores (may be
    #                          a fraction: the share of a machine the job got)
    workers_per_host: int = 1
    shards_on_workers: bool = False  # shard s on worker host s (else hosts of their own)
    link_efficiency: float = 1.0  # payload rate / link rate (TCP and framing)
    cpu_per_byte: float = 0.0  # kernel CPU seconds per byte moved, half at each end,
    #                            spent while the bytes cross (not in any process's CPU)
    background_threads: int = 0  # shared_cores: threads of other work always runnable

    def check(self) -> None:
        rules = [
            ("link_bps", self.link_bps > 0),
            ("latency_s", self.latency_s >= 0),
            ("cores", self.cores >= 1),
            ("shared_cores", self.shared_cores >= 0),
            ("workers_per_host", self.workers_per_host >= 1),
            ("link_efficiency", 0 < self.link_efficiency <= 1),
            ("cpu_per_byte", self.cpu_per_byte >= 0),
            ("background_threads", self.background_threads >= 0),
        ]
        for name, ok in rules:
            if not ok:
                raise ValueError(f"Cluster.{name} = {getattr(self, name)!r} is out of range")


@dataclass
class Costs:
    """A shard's CPU time per message (seconds), linear in what the message carries:
    ``fixed`` per message, plus per float of a dense range, per entry of a sparse
    push, per float a delta pull scans and per entry it sends. bench/shardcap
    measures them (bench/sim/calibrate.py fits them)."""

    push_fixed: float = 0.0
    push_dense_per_param: float = 0.0
    push_sparse_per_entry: float = 0.0
    push_sparse_per_param: float = 0.0  # rules whose sparse push passes over the range
    pull_fixed: float = 0.0
    pull_dense_per_param: float = 0.0
    pull_delta_per_param: float = 0.0
    pull_delta_per_entry: float = 0.0
    header_bytes: int = 48

    def push_s(self, job: Job, n_s: int, k_s: int) -> float:
        if job.push == "dense":
            return self.push_fixed + self.push_dense_per_param * n_s
        return (self.push_fixed + self.push_sparse_per_entry * k_s
                + self.push_sparse_per_param * n_s)

    def pull_s(self, job: Job, n_s: int, kp_s: int, dense: bool) -> float:
        if dense:
            return self.pull_fixed + self.pull_dense_per_param * n_s
        return self.pull_fixed + self.pull_delta_per_param * n_s + self.pull_delta_per_entry * kp_s


@dataclass
class Result:
    steps: int  # steps done by all workers together
    elapsed_s: float  # first step's start to the last worker's end
    step_s: float  # mean step time of a worker
    samples_per_s: float  # sum over workers of batch * steps / their own time
    staleness: Dict[int, int]  # versions behind -> pushes (all shards)
    link_util: Dict[str, float]  # "w3.up" -> fraction of the link's time busy
    shard_util: List[float]  # fraction of the time each shard's loop was busy
    bytes_per_step: float  # one worker's pushes and pulls, headers included
    cpu_busy: float = 0.0  # shared_cores: the fraction of the pool's core-seconds used

    def mean_staleness(self) -> float:
        n = sum(self.staleness.values())
        return sum(k * v for k, v in self.staleness.items()) / n if n else 0.0


def shard_ranges(n: int, shards: int) -> List[int]:
    """Each shard's parameter count: blocks of 64 split evenly (docs/protocol.md, 4)."""
    b = -(-n // 64)
    sizes = []
    for s in range(shards):
        lo = min(64 * (b * s // shards), n)
        hi = min(64 * (b * (s + 1) // shards), n)
        sizes.append(hi - lo)
    return sizes


def message_bytes(job: Job, header: int = 48) -> Dict[str, float]:
    """Bytes one worker sends and receives per step, summed over shards:
    push, ack, pull (request), reply."""
    k = math.ceil(job.density * job.params)
    kp = math.ceil((job.pull_density or job.density) * job.params)
    s = job.shards
    return {
        "push": (4 * job.params if job.push == "dense" else 8 * k) + s * header,
        "ack": s * header,
        "pull": s * header,
        "reply": (4 * job.params if job.pull == "dense" else 8 * kp) + s * header,
    }


# --- the engine: events, and fluid sharing of links and cores -------------------------


class _Waitable:
    """Something a process can wait for; callbacks run once it is done."""

    __slots__ = ("done", "value", "_cbs")

    def __init__(self):
        self.done = False
        self.value = None
        self._cbs = []

    def then(self, cb):
        if self.done:
            cb(self)
        else:
            self._cbs.append(cb)

    def fire(self, value=None):
        if self.done:
            return
        self.done = True
        self.value = value
        cbs, self._cbs = self._cbs, []
        for cb in cbs:
            cb(self)


class _Resource:
    __slots__ = ("name", "cap", "acts", "busy_s", "busy_since", "carried", "free")

    def __init__(self, name, cap):
        self.name = name
        self.cap = cap
        self.acts = set()
        self.busy_s = 0.0  # time with at least one activity
        self.busy_since = 0.0
        self.carried = 0.0  # units served (bytes, CPU seconds)
        self.free = 0.0  # a link: when its queue of messages is done


class _Activity(_Waitable):
    __slots__ = ("amount", "left", "res", "cap", "rate", "last", "gen")

    def __init__(self, amount, res, cap, now):
        super().__init__()
        self.amount = amount
        self.left = amount
        self.res = res
        self.cap = cap
        self.rate = 0.0
        self.last = now
        self.gen = 0


class _Engine:
    """Events in time order, and activities (transfers, CPU work) that share
    resources (links, core pools). Sharing: an activity runs at the least of its
    cap and, over its resources, the resource's capacity divided by the number of
    activities on it (an equal share of its most contended resource; what another
    activity leaves unused there is not handed on). In a star of hosts, where a
    transfer is limited by its sender's uplink or its receiver's downlink, this is
    max-min fairness whenever one side is the bottleneck for all of a resource's
    transfers; for cores it is processor sharing. Only the activities on the
    resources of one that starts or ends change rate, which keeps an event's cost
    to those (the 256-worker predictions need that)."""

    def __init__(self):
        self.now = 0.0
        self._q = []
        self._seq = 0

    def at(self, dt, fn):
        self._seq += 1
        heapq.heappush(self._q, (self.now + dt, self._seq, fn))

    def timeout(self, dt) -> _Waitable:
        w = _Waitable()
        self.at(dt, lambda: w.fire())
        return w

    def all_of(self, ws) -> _Waitable:
        out = _Waitable()
        left = [len(ws)]
        if not ws:
            out.fire()
            return out

        def one(_):
            left[0] -= 1
            if left[0] == 0:
                out.fire()

        for w in ws:
            w.then(one)
        return out

    def work(self, amount, res, cap=INF) -> _Waitable:
        """amount units through every resource in res, at most cap per second."""
        a = _Activity(amount, res, cap, self.now)
        if amount <= 0:
            a.fire()
            return a
        touched = set()
        for r in res:
            if not r.acts:
                r.busy_since = self.now
            r.acts.add(a)
            touched |= r.acts
        self._reshare(touched)
        return a

    def process(self, gen):
        """Runs a generator that yields waitables; it resumes when each is done."""

        def step(w=None):
            try:
                nxt = gen.send(w.value if w is not None else None)
            except StopIteration:
                return
            nxt.then(step)

        step()

    def _reshare(self, acts):
        now = self.now
        for a in acts:
            rate = a.cap
            for r in a.res:
                share = r.cap / len(r.acts)
                if share < rate:
                    rate = share
            if rate == a.rate and a.gen:
                continue
            a.left -= a.rate * (now - a.last)
            a.last = now
            a.rate = rate
            a.gen += 1
            gen = a.gen
            if a.left == INF:  # background work: never ends
                continue
            self.at(max(a.left, 0.0) / rate, lambda a=a, gen=gen: self._complete(a, gen))

    def _complete(self, a, gen):
        if gen != a.gen or a.done:
            return
        touched = set()
        for r in a.res:
            r.acts.discard(a)
            r.carried += a.amount
            if not r.acts:
                r.busy_s += self.now - r.busy_since
            touched |= r.acts
        self._reshare(touched)
        a.fire()

    def run(self):
        while self._q:
            t, _, fn = heapq.heappop(self._q)
            self.now = t
            fn()


# --- the job ------------------------------------------------------------------------


class _Shard:
    """One shard's loop: messages handled one at a time, in arrival order."""

    def __init__(self, sim, idx, host_cpu, n_s, k_s, kp_s):
        self.sim = sim
        self.idx = idx
        self.cpu = host_cpu
        self.n_s, self.k_s, self.kp_s = n_s, k_s, kp_s
        self.queue = []  # (cost, waitable)
        self.busy = False
        self.busy_s = 0.0
        self.version = 0
        self.clock = [0] * sim.job.workers  # pushes taken per worker (its next step)
        self.waiting = []  # (step, worker, waitable): pulls held by sync / ssp

    def handle(self, cost) -> _Waitable:
        w = _Waitable()
        self.queue.append((cost, w))
        if not self.busy:
            self._next()
        return w

    def _next(self):
        if not self.queue:
            self.busy = False
            return
        self.busy = True
        cost, w = self.queue.pop(0)
        t0 = self.sim.eng.now
        done = self.sim.cpu_work(cost, self.cpu)

        def finish(_):
            self.busy_s += self.sim.eng.now - t0
            w.fire()
            self._next()

        done.then(finish)

    def may_start(self, step):
        job = self.sim.job
        if job.mode == "async" or step == 0:
            return True
        slowest = min(self.clock)
        if job.mode == "sync":
            return slowest >= step
        return slowest >= step - job.staleness

    def pushed(self, worker, step, seen_version):
        self.sim.staleness[self.version - seen_version] = (
            self.sim.staleness.get(self.version - seen_version, 0) + 1
        )
        before = min(self.clock)
        self.clock[worker] = max(self.clock[worker], step + 1)
        if self.sim.job.mode == "sync":
            self.version += min(self.clock) - before  # the round's last push applies it
        else:
            self.version += 1
        still = []
        for st, wk, w in self.waiting:
            if self.may_start(st):
                w.fire()
            else:
                still.append((st, wk, w))
        self.waiting = still

    def wait_step(self, worker, step) -> _Waitable:
        w = _Waitable()
        if self.may_start(step):
            w.fire()
        else:
            self.waiting.append((step, worker, w))
        return w


class _Sim:
    def __init__(self, job: Job, cl: Cluster, costs: Costs):
        self.job, self.cl, self.costs = job, cl, costs
        self.eng = _Engine()
        self.rng = random.Random(job.seed)
        self.staleness = {}
        bps = cl.link_bps * cl.link_efficiency / 8.0  # bytes per second
        n_worker_hosts = -(-job.workers // cl.workers_per_host)
        self.links = {}
        self.cpus = {}
        pool = _Resource("cpu", cl.shared_cores) if cl.shared_cores else None
        self.pool = pool
        self.pool_before = 0.0

        def host(name):
            if name not in self.links:
                self.links[name] = (_Resource(name + ".up", bps), _Resource(name + ".down", bps))
                self.cpus[name] = pool or _Resource(name + ".cpu", cl.cores)

        self.worker_host = []
        for w in range(job.workers):
            h = f"w{w // cl.workers_per_host}"
            host(h)
            self.worker_host.append(h)
        self.shard_host = []
        for s in range(job.shards):
            h = f"w{s % n_worker_hosts}" if cl.shards_on_workers else f"s{s}"
            host(h)
            self.shard_host.append(h)
        self.procs_on = {}
        for h in self.worker_host + self.shard_host:
            name = self.cpus[h].name
            self.procs_on[name] = self.procs_on.get(name, 0) + 1
        if pool and cl.background_threads:
            self.procs_on[pool.name] += cl.background_threads
            for _ in range(cl.background_threads):
                self.eng.work(INF, [pool], cap=1.0)
        sizes = shard_ranges(job.params, job.shards)
        k = math.ceil(job.density * job.params)
        kp = math.ceil((job.pull_density or job.density) * job.params)
        self.shards = [
            _Shard(self, s, self.cpus[self.shard_host[s]], sizes[s],
                   max(1, round(k * sizes[s] / job.params)),
                   max(1, round(kp * sizes[s] / job.params)))
            for s in range(job.shards)
        ]
        self.done_at = [0.0] * job.workers
        self.start_at = [0.0] * job.workers
        self.finished = 0
        self.barrier = _Waitable()
        self.ready = 0
        self.busy_before = {}
        self.started = _Waitable()

    # A message from host a to host b: a's uplink sends it, b's downlink receives
    # it, each in the order messages were sent (FIFO), cut-through (the downlink
    # starts once the uplink has, and ends no sooner than it), then the latency.
    # For throughput this is what fair sharing gives (a link busy whenever it has
    # work, at its full rate); single messages finish earlier than under fair
    # sharing, and a sender is not slowed by a receiver's queue (the switch is
    # taken to buffer it).
    def send(self, a, b, nbytes):
        if a == b:
            return self.eng.timeout(0.0)
        up, down = self.links[a][0], self.links[b][1]
        now = self.eng.now
        dur = nbytes / up.cap
        us = max(now, up.free)
        ue = us + dur
        de = max(max(us, down.free) + dur, ue)
        up.free, down.free = ue, de
        for r in (up, down):
            r.busy_s += dur
            r.carried += nbytes
        wire = self.eng.timeout(de - now + self.cl.latency_s)
        if self.cl.cpu_per_byte <= 0:
            return wire
        half = nbytes * self.cl.cpu_per_byte / 2
        return self.eng.all_of([wire, self.cpu_work(half, self.cpus[a]),
                                self.cpu_work(half, self.cpus[b])])

    # CPU work of one thread: processor sharing on the host's cores (or the shared
    # pool); on a host whose cores outnumber its processes, simply the time.
    def cpu_work(self, seconds, cpu):
        if cpu.cap >= self.procs_on[cpu.name]:
            return self.eng.timeout(seconds)
        return self.eng.work(seconds, [cpu], cap=1.0)

    def compute_time(self):
        job = self.job
        if job.compute_cv <= 0:
            return job.compute_s
        s2 = math.log(1 + job.compute_cv**2)
        return self.rng.lognormvariate(math.log(job.compute_s) - s2 / 2, math.sqrt(s2))

    def exchange(self, w, step, seen, dense_pull=False):
        """Step `step`'s push to every shard and the pull that follows, as one
        process; its value is the versions pulled."""
        job, H, c = self.job, self.costs.header_bytes, self.costs
        me = self.worker_host[w]

        def one(s):
            sh = self.shards[s]
            hs = self.shard_host[s]
            if step is not None:
                pbytes = (4 * sh.n_s if job.push == "dense" else 8 * sh.k_s) + H
                yield self.send(me, hs, pbytes)
                yield sh.handle(c.push_s(job, sh.n_s, sh.k_s))
                sh.pushed(w, step, seen[s])
                yield self.send(hs, me, H)
            yield self.send(me, hs, H)
            nxt = step + 1 if step is not None else 0
            yield sh.wait_step(w, nxt)
            dense = dense_pull or job.pull == "dense"
            yield sh.handle(c.pull_s(job, sh.n_s, sh.kp_s, dense))
            version = sh.version
            rbytes = (4 * sh.n_s if dense else 8 * sh.kp_s) + H
            yield self.send(hs, me, rbytes)
            return version

        results = [None] * job.shards
        waits = []
        for s in range(job.shards):
            out = _Waitable()

            def run(s=s, out=out):
                v = yield from one(s)
                results[s] = v
                out.fire()

            self.eng.process(run())
            waits.append(out)
        done = _Waitable()
        self.eng.all_of(waits).then(lambda _: done.fire(list(results)))
        return done

    def worker(self, w):
        job, eng = self.job, self.eng
        cpu = self.cpus[self.worker_host[w]]
        seen = yield self.exchange(w, None, None, dense_pull=True)  # the first pull
        self.ready += 1
        if self.ready == job.workers:
            self.started.fire()
        yield self.started  # every worker starts its steps once all have the model
        self.start_at[w] = eng.now
        if not self.busy_before:
            self.busy_before = {r.name: r.busy_s for ud in self.links.values() for r in ud}
            for sh in self.shards:
                sh.busy_s = 0.0
            self.staleness.clear()
            self.pool_before = self.pool.carried if self.pool else 0.0
        pending = None
        for step in range(job.steps):
            yield eng.timeout(self.compute_time())
            yield self.cpu_work(job.worker_cpu_s, cpu)
            if job.pipeline:
                if pending is not None:
                    seen = yield pending
                pending = self.exchange(w, step, seen)
            else:
                seen = yield self.exchange(w, step, seen)
        if pending is not None:
            yield pending
        self.done_at[w] = eng.now
        if job.final_pull:
            self.finished += 1
            if self.finished == job.workers:
                self.barrier.fire()
            yield self.barrier
            yield self.exchange(w, None, None, dense_pull=True)
            self.done_at[w] = eng.now

    def run(self) -> Result:
        job = self.job
        for w in range(job.workers):
            self.eng.process(self.worker(w))
        self.eng.run()
        t0 = min(self.start_at)
        elapsed = max(self.done_at) - t0
        per = [self.done_at[w] - self.start_at[w] for w in range(job.workers)]
        util = {}
        for up, down in self.links.values():
            for r in (up, down):
                util[r.name] = (r.busy_s - self.busy_before.get(r.name, 0.0)) / elapsed if elapsed > 0 else 0.0
        mb = message_bytes(job, self.costs.header_bytes)
        return Result(
            steps=job.steps * job.workers,
            elapsed_s=elapsed,
            step_s=sum(per) / len(per) / job.steps,
            samples_per_s=sum(job.batch * job.steps / p for p in per if p > 0),
            staleness=dict(sorted(self.staleness.items())),
            link_util=util,
            shard_util=[s.busy_s / elapsed if elapsed > 0 else 0.0 for s in self.shards],
            bytes_per_step=sum(mb.values()),
            cpu_busy=(self.pool.carried - self.pool_before) / (self.pool.cap * elapsed)
            if self.pool and elapsed > 0 else 0.0,
        )


def simulate(job: Job, cluster: Cluster, costs: Optional[Costs] = None) -> Result:
    """Runs the job on the cluster; see the module's text for what is modelled."""
    job.check()
    cluster.check()
    return _Sim(job, cluster, costs or Costs()).run()
