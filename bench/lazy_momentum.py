#!/usr/bin/env python3
"""bench/lazy_momentum.py: is a lazy sparse momentum exact enough? (issue 16)

A shard with [optimizer] kind = momentum moves every parameter on every push,
sparse or not (u <- mu u + g, w <- w - lr u), so a Top-k push costs a full pass.
A lazy form would touch only the pushed entries: an entry skipped for d pushes is
brought up to date when it is next touched or pulled, in closed form,

    w <- w - lr u (mu + mu^2 + ... + mu^d),   u <- mu^d u,

then takes its gradient as the eager rule does. This runs both, in float32 with
the shard's arithmetic (numpy float32 operations are IEEE float32, as the C
ones), on the same pushes, and compares the parameters after a final pull (every
entry brought up to date) with each other and with the eager rule in float64 (the
error each form's float32 rounding makes). It does not change dcps; it measures.

usage: bench/lazy_momentum.py [N [PUSHES [DENSITY [SEED]]]]
       defaults 1048576 200 0.01 1; prints a CSV row per (mu, lr)."""
import sys

import numpy as np

F32 = np.float32


def run(n, pushes, density, seed, mu, lr):
    rng = np.random.default_rng(seed)
    k = max(1, int(round(density * n)))
    w0 = rng.standard_normal(n).astype(F32)
    we, ue = w0.copy(), np.zeros(n, F32)  # eager
    wr, ur = w0.astype(np.float64), np.zeros(n)  # eager in float64: the reference
    wl, ul = w0.copy(), np.zeros(n, F32)  # lazy
    last = np.zeros(n, np.int64)  # the push after which entry i is up to date
    mu, lr = F32(mu), F32(lr)
    # mu^d and mu + ... + mu^d for every d up to pushes, in float32 as a shard would
    # keep them in a table.
    powers = np.cumprod(np.full(pushes + 1, mu, F32), dtype=F32)
    powers = np.concatenate(([F32(1)], powers)).astype(F32)
    sums = np.concatenate(([F32(0)], np.cumsum(powers[1:], dtype=F32))).astype(F32)

    def catch_up(idx, t):
        d = t - last[idx]
        wl[idx] = wl[idx] - lr * (ul[idx] * sums[d])
        ul[idx] = ul[idx] * powers[d]
        last[idx] = t

    for t in range(1, pushes + 1):
        idx = np.sort(rng.choice(n, k, replace=False))
        g = (rng.standard_normal(k) * 0.1).astype(F32)
        # eager: the dense arithmetic of dcps_momentum_sparse_to
        ge = np.zeros(n, F32)
        ge[idx] = g
        ue = mu * ue + ge
        we = we - lr * ue
        ur = float(mu) * ur + ge
        wr = wr - float(lr) * ur
        # lazy: the pushed entries only
        catch_up(idx, t - 1)
        ul[idx] = mu * ul[idx] + g
        wl[idx] = wl[idx] - lr * ul[idx]
        last[idx] = t
    catch_up(np.arange(n), pushes)  # a pull

    moved = np.abs(we - w0)
    diff = np.abs(wl - we)
    ulp = np.abs(wl.view(np.int32).astype(np.int64) - we.view(np.int32).astype(np.int64))
    touched = moved > 0
    rel = diff[touched] / moved[touched]
    err_e, err_l = np.abs(we - wr), np.abs(wl - wr)
    return dict(err_eager=float(err_e.max()), err_lazy=float(err_l.max()),
                rms_eager=float(np.sqrt(np.mean(err_e ** 2))),
                rms_lazy=float(np.sqrt(np.mean(err_l ** 2))), max_abs=float(diff.max()), max_ulp=int(ulp.max()),
                median_ulp=float(np.median(ulp[touched])),
                touched=float(np.mean(touched)), equal=float(np.mean(diff[touched] == 0)),
                max_rel_to_moved=float(rel.max()), p99_rel_to_moved=float(np.quantile(rel, 0.99)))


def main(argv):
    n = int(argv[1]) if len(argv) > 1 else 1 << 20
    pushes = int(argv[2]) if len(argv) > 2 else 200
    density = float(argv[3]) if len(argv) > 3 else 0.01
    seed = int(argv[4]) if len(argv) > 4 else 1
    if n < 1 or pushes < 1 or not 0 < density <= 1:
        sys.exit("lazy_momentum.py: N and PUSHES must be at least 1, DENSITY in (0, 1]")
    print(f"# n {n}, {pushes} pushes of {density:g} of the entries (random, N(0, 0.01) values), "
          f"seed {seed}; w0 ~ N(0, 1); float32")
    print("mu,lr,fraction_moved,fraction_of_those_equal,max_abs_diff,max_ulp,median_ulp,"
          "max_diff_over_movement,p99_diff_over_movement,eager_max_err,lazy_max_err,"
          "eager_rms_err,lazy_rms_err")
    for mu, lr in ((0.9, 0.05), (0.99, 0.05), (0.9, 0.5)):
        r = run(n, pushes, density, seed, mu, lr)
        print(f"{mu},{lr},{r['touched']:.4f},{r['equal']:.4f},{r['max_abs']:.3g},{r['max_ulp']},"
              f"{r['median_ulp']:g},{r['max_rel_to_moved']:.3g},{r['p99_rel_to_moved']:.3g},"
              f"{r['err_eager']:.3g},{r['err_lazy']:.3g},{r['rms_eager']:.3g},{r['rms_lazy']:.3g}")


if __name__ == "__main__":
    main(sys.argv)
