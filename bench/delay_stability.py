#!/usr/bin/env python3
"""How far a delay moves the stability edge of an optimizer with EMA momentum (Adam's
first moment), on the one-dimensional quadratic f(x) = h x^2 / 2.

    bench/delay_stability.py

The update applied at step t uses the gradient h x of the parameters `delay` steps old:
m <- beta1 m + (1 - beta1) h x_{t-delay}; x <- x - lr m. Adam is this with lr divided by
sqrt(v) per coordinate, so lr h here is the preconditioned sharpness times lr. Prints, for
each beta1 and delay, the largest lr h for which the iteration converges (the spectral
radius of its companion matrix below 1), found by bisection. With --lookahead, the
gradient is taken instead at x_{t-delay} - lr (beta1 + ... + beta1^delay) m_{t-delay}:
where the momentum alone would carry the parameters by the time it is applied (DANA's
idea, Hakimi et al. 2019), simulated for 3,000 steps.
"""
import argparse
import sys

import numpy as np


def stable(a, beta, delay):
    """Whether x_{t+1} = x_t - a m_{t+1}, m_{t+1} = beta m_t + (1 - beta) x_{t-delay}
    converges: state (x_t, ..., x_{t-delay}, m_t)."""
    n = delay + 2
    M = np.zeros((n, n))
    M[n - 1, n - 1] = beta
    M[n - 1, delay] += 1 - beta
    M[0, 0] = 1
    M[0, :] -= a * M[n - 1, :]
    for i in range(1, delay + 1):
        M[i, i - 1] = 1
    return max(abs(np.linalg.eigvals(M))) < 1


def stable_lookahead(a, beta, delay, steps=3000):
    xs, ms = [1.0] * (delay + 2), [0.0] * (delay + 2)
    x, m = 1.0, 0.0
    ahead = sum(beta ** k for k in range(1, delay + 1))
    for _ in range(steps):
        m = beta * m + (1 - beta) * (xs[-1 - delay] - a * ahead * ms[-1 - delay])
        x -= a * m
        xs.append(x)
        ms.append(m)
        if abs(x) > 1e6:
            return False
    return max(abs(v) for v in xs[-50:]) < 1


def edge(test, beta, delay):
    lo, hi = 0.0, 1000.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if test(mid, beta, delay) else (lo, mid)
    return lo


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lookahead", action="store_true", help="also the lookahead pull")
    args = ap.parse_args()
    print("beta1,delay,max_lr_h" + (",max_lr_h_lookahead" if args.lookahead else ""))
    for beta in (0.0, 0.5, 0.8, 0.9, 0.99):
        for delay in (0, 1, 2, 4):
            row = f"{beta},{delay},{edge(stable, beta, delay):.3f}"
            if args.lookahead:
                row += f",{edge(stable_lookahead, beta, delay):.2f}"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
