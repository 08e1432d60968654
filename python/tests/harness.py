"""dcps Python tests — running the real programs, as tests/harness.c does for C.

Shards are real dcps-server processes from the build tree (DCPS_BUILDDIR),
bound to ephemeral ports on 127.0.0.1 and reporting them through
--endpoint-file; workers are real processes (python3 scripts or dcps-worker).
Everything started is killed when the test ends. ``main()`` runs a module's
unittest cases, prints one 'N passed, N failed' line and exits 77 when
PyTorch is missing (the suite is then skipped, as GPU suites are without a GPU).
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

BUILD = os.environ.get("DCPS_BUILDDIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
SRC = os.environ.get("DCPS_SRCDIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = "/usr/share/datasets/fashion-mnist"
TRAIN = (f"{DATA}/train-images-idx3-ubyte.gz", f"{DATA}/train-labels-idx1-ubyte.gz")
TEST = (f"{DATA}/t10k-images-idx3-ubyte.gz", f"{DATA}/t10k-labels-idx1-ubyte.gz")
MLP_WORKER = os.path.join(SRC, "python", "tests", "mlp_worker.py")

# Scratch directories, owned as tests/scratch.h says for C: main() makes one
# directory for the run and points TMPDIR at it; a Job's directory is made
# there, and goes when the test that made it passes. Whatever is left at the
# end (a failed test's jobs, a class's) goes with the run's directory when
# every test passed; otherwise it stays and each path is printed once. Outside
# main() (bench/torch_step.py), Job.close() removes its directory itself.
_run = None   # the run's directory, while main() runs the tests
_made = None  # the directories of the Jobs made by the test running now


def job_text(shards=2, workers=2, **sections):
    """A job file: the given sections ({"job": {"mode": "sync"}, ...}) over a
    small default (784,64,10 MLP, 2048 training examples, batch 32, 1 epoch).
    "@DIR@" in a value becomes the Job's own directory (a checkpoint_dir)."""
    base = {
        "job": {"name": "pytest", "workers": workers, "mode": "async", "seed": 42},
        "servers": {"shards": ", ".join(["tcp://127.0.0.1:*"] * shards)},
        "model": {"layers": "784,64,10"},
        "data": {"train_images": TRAIN[0], "train_labels": TRAIN[1], "test_images": TEST[0],
                 "test_labels": TEST[1], "batch_size": 32, "epochs": 1, "train_limit": 2048},
        "optimizer": {"kind": "sgd", "lr": 0.1},
        "worker": {"log_every": 1000, "timeout_ms": 1000, "retries": 3},
        "server": {"heartbeat_ms": 200, "dead_after_ms": 2000},
    }
    for sec, keys in sections.items():
        base.setdefault(sec, {}).update(keys)
    return "".join(f"[{s}]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items() if v is not None)
                   for s, keys in base.items())


class Job:
    """A job file in a scratch directory and its running shards."""

    def __init__(self, text, shards=2, netns=None, cpus=None):
        """netns: a network namespace per shard (bench/netem.sh's), each shard
        run in its own through `ip netns exec` (the job's servers.shards then
        names addresses of those namespaces). cpus: the CPUs the shards may run
        on (taskset -c's list, "1" say), all of their threads."""
        self.netns = netns
        self.cpus = cpus
        self.dir = tempfile.mkdtemp(prefix="dcps-py-")
        if _made is not None:
            _made.append(self.dir)
        self.path = os.path.join(self.dir, "job.ini")
        with open(self.path, "w") as f:
            f.write(text.replace("@DIR@", self.dir))
        self.procs = []
        self.servers = []
        self.shards = None
        for s in range(shards):
            self.servers.append(self.start_shard(s))
        self.shards = "servers.shards=" + ",".join(self.endpoints)

    def start_shard(self, s):
        """Starts shard s: on a port of its choosing the first time, on its own
        port again after that (restart)."""
        ep = os.path.join(self.dir, f"shard{s}.endpoint")
        if self.shards is None and s > 0:
            # A sync job's other shards connect to shard 0 (server/rounds.h),
            # which chose its port: they are told it.
            argv = ["--endpoint-file", ep, "--leader", self.endpoints[0]]
        elif self.shards is None:
            argv = ["--endpoint-file", ep]
        else:
            os.unlink(ep)
            argv = ["--endpoint-file", ep, "--set", self.shards]
        log = open(os.path.join(self.dir, f"shard{s}.log"), "a")
        wrap = ["ip", "netns", "exec", self.netns[s]] if self.netns else []
        if self.cpus is not None:
            wrap += ["taskset", "-c", self.cpus]
        p = subprocess.Popen([*wrap, os.path.join(BUILD, "dcps-server"), "--config", self.path,
                              "--shard", str(s), *argv], stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        deadline = time.monotonic() + 10
        while not (os.path.exists(ep) and os.path.getsize(ep) > 0):
            if p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"shard {s} did not start: {self.shard_log(s)}")
            time.sleep(0.02)
        return p

    @property
    def endpoints(self):
        out = []
        for s in range(len(self.servers)):
            with open(os.path.join(self.dir, f"shard{s}.endpoint")) as f:
                out.append(f.read().strip())
        return out

    def restart(self, s, sig=signal.SIGTERM):
        """Stops shard s with sig (SIGTERM writes its checkpoint, SIGKILL does
        not) and starts it again on the same endpoint."""
        p = self.servers[s]
        p.send_signal(sig)
        p.wait(10)
        self.servers[s] = self.start_shard(s)

    def shard_log(self, s):
        with open(os.path.join(self.dir, f"shard{s}.log")) as f:
            return f.read()

    def env(self, rank):
        """The environment of a worker of this job (what launch-local.sh sets)."""
        env = dict(os.environ)
        env.update(DCPS_JOB=self.path, DCPS_RANK=str(rank), DCPS_SET=self.shards,
                   OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        return env

    def spawn(self, rank, argv, tag=None):
        """Starts argv as worker `rank`; its output goes to tag.out and tag.err."""
        tag = tag or f"worker{rank}"
        out = open(os.path.join(self.dir, f"{tag}.out"), "w")
        err = open(os.path.join(self.dir, f"{tag}.err"), "w")
        p = subprocess.Popen(argv, env=self.env(rank), stdout=out, stderr=err)
        self.procs.append(p)
        return p

    def spawn_c_worker(self, rank, *extra, tag=None):
        return self.spawn(rank, [os.path.join(BUILD, "dcps-worker"), "--config", self.path,
                                 "--rank", str(rank), "--set", self.shards, *extra], tag)

    def spawn_mlp_worker(self, rank, layers, limit, *extra, tag=None):
        return self.spawn(rank, [sys.executable, MLP_WORKER, "--layers", layers, "--images",
                                 TRAIN[0], "--labels", TRAIN[1], "--limit", str(limit), *extra],
                          tag)

    def output(self, tag, ext="out"):
        with open(os.path.join(self.dir, f"{tag}.{ext}")) as f:
            return f.read()

    def wait(self, p, timeout=180):
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return -1

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if _run is None:
            shutil.rmtree(self.dir, ignore_errors=True)


def final(text):
    """The values of the last final: line of text, as a dict of strings."""
    lines = [ln for ln in text.splitlines() if ln.startswith("final:")]
    if not lines:
        return {}
    return dict(item.split("=", 1) for item in lines[-1].split()[1:])


class _Result(unittest.TextTestResult):
    """A test's result that also removes the test's Job directories when it
    passed (or was skipped) and leaves them to main() when it did not."""

    def _not_passed(self):
        return len(self.failures) + len(self.errors) + len(self.unexpectedSuccesses)

    def startTest(self, test):
        global _made
        _made = []
        self._before = self._not_passed()
        super().startTest(test)

    def stopTest(self, test):
        global _made
        super().stopTest(test)
        if self._not_passed() == self._before:
            for d in _made:
                shutil.rmtree(d, ignore_errors=True)
        _made = None


def main(need_torch=True, need_data=True):
    """Runs the calling module's tests; one summary line; 77 without PyTorch or
    the Fashion-MNIST files when the module needs them."""
    if need_data and not os.path.exists(TRAIN[0]):
        print(f"SKIP: {TRAIN[0]} is missing (install dataset-fashion-mnist)")
        sys.exit(77)
    try:
        if need_torch:
            import torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: PyTorch is not importable by {sys.executable} ({e}); install "
              "python3-torch and configure with PYTHON=/usr/bin/python3")
        sys.exit(77)
    global _run
    _run = tempfile.mkdtemp(prefix="dcps-test-")
    os.environ["TMPDIR"] = tempfile.tempdir = _run  # the programs' and this process's
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules["__main__"])
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2,
                                     resultclass=_Result).run(suite)
    failed = len(result.failures) + len(result.errors)
    print(f"python: {result.testsRun - failed} passed, {failed} failed")
    left = [] if result.wasSuccessful() else sorted(os.listdir(_run))
    for name in left:
        print(f"kept: {os.path.join(_run, name)}")
    if not left:
        shutil.rmtree(_run, ignore_errors=True)
    sys.exit(0 if result.wasSuccessful() else 1)
