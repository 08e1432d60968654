"""bench/faults_churn.py — a sync job of many workers, one of them killed and
started again every few seconds (issue 29: "16 workers with one killed and
restarted every 10 s" once split rounds).

2 shards and W workers of the built-in MLP (python/tests/test_faults.py's job,
EPOCHS epochs over LIMIT examples), sync; every EVERY seconds a random worker is
killed (SIGKILL) and started again at once (it resumes at the round its shards
expect). Prints each kill, then whether every worker finished, both shards'
versions and round digests, and every rank's final accuracy, against the same
job undisturbed. Exit 1 if anything hung or the shards ended apart.

usage: python3 bench/faults_churn.py [W] [EVERY] [SEED]   (DCPS_BUILDDIR: the build)
"""
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python",
                                "tests"))
import harness  # noqa: E402
import test_faults as T  # noqa: E402

LIMIT, EPOCHS = 60000, 24


def run(workers, every, seed, churn):
    rng = random.Random(seed)
    text = T.fault_job("sync", epochs=EPOCHS, limit=LIMIT).replace(
        "workers = 3", f"workers = {workers}")
    job = harness.Job(text)
    try:
        procs = [job.spawn_c_worker(r) for r in range(workers)]
        tags = [f"worker{r}" for r in range(workers)]
        kills = 0
        while churn and any(p.poll() is None for p in procs):
            time.sleep(every)
            alive = [r for r in range(workers) if procs[r].poll() is None]
            if len(alive) < workers:  # someone finished: the job is ending
                break
            r = rng.choice(alive)
            procs[r].kill()
            procs[r].wait()
            kills += 1
            tags[r] = f"worker{r}k{kills}"
            procs[r] = job.spawn_c_worker(r, tag=tags[r])
            print(f"  killed and restarted rank {r} ({kills})", flush=True)
        codes = [job.wait(p, 600) for p in procs]
        for p in job.servers:
            p.terminate()
        for p in job.servers:
            job.wait(p, 20)
        ends = [T.shard_end(job.shard_log(s)) for s in range(2)]
        accs = [harness.final(job.output(t)).get("test_acc") for t in tags]
        late = [r for r, t in enumerate(tags) if codes[r] == 1 and
                "run to its end" in job.output(t, "err")]
        return codes, ends, accs, kills, late
    finally:
        job.close()


def main():
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    every = float(sys.argv[2]) if len(sys.argv) > 2 else 10
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    codes, ends, accs, _, _ = run(workers, every, seed, churn=False)
    print(f"undisturbed: exits {codes}, shards {ends}, accuracy {sorted(set(accs))}")
    codes, ends, accs, kills, late = run(workers, every, seed, churn=True)
    finished = all(c == 0 or r in late for r, c in enumerate(codes))
    apart = ends[0] != ends[1]
    print(f"churn: {kills} kills, every worker finished {finished} (late {late}), shards "
          f"{ends}, apart {apart}, accuracy {sorted(set(a for a in accs if a))}")
    return 0 if finished and not apart else 1


if __name__ == "__main__":
    sys.exit(main())
