"""Time ``lipsweep.decide.pareto.non_dominated_ranks`` against Deb's fast non-dominated sort in pure
Python (NSGA-II, Deb et al. 2002), interleaved in one run, medians over repeats; the two must
agree on every input. Shows that `lipsweep pareto` stays instant for any realistic sweep.

    python benchmarks/bench_pareto.py [--repeats 5] [--objectives 4]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

from lipsweep.decide.pareto import non_dominated_ranks


def deb_fast_sort(values: list[list[float]], dirs: list[str]) -> list[int]:
    """Reference: Deb's fast non-dominated sort, larger-is-better after sign flips."""
    sign = [1.0 if d == "max" else -1.0 for d in dirs]
    w = [[s * x for s, x in zip(sign, row)] for row in values]
    n = len(w)
    dominated_by = [[] for _ in range(n)]
    count = [0] * n
    for i in range(n):
        for j in range(i + 1, n):
            a, b = w[i], w[j]
            ge = all(x >= y for x, y in zip(a, b))
            le = all(x <= y for x, y in zip(a, b))
            if ge and not le:
                dominated_by[i].append(j)
                count[j] += 1
            elif le and not ge:
                dominated_by[j].append(i)
                count[i] += 1
    ranks = [0] * n
    front = [i for i in range(n) if count[i] == 0]
    r = 1
    while front:
        nxt = []
        for i in front:
            ranks[i] = r
            for j in dominated_by[i]:
                count[j] -= 1
                if count[j] == 0:
                    nxt.append(j)
        front, r = nxt, r + 1
    return ranks


def timed(fn, *args) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--objectives", type=int, default=4)
    args = ap.parse_args()
    m = args.objectives
    dirs = (["max", "max", "max", "min"] * m)[:m]
    rng = np.random.default_rng(0)
    print(
        f"machine: {platform.processor() or platform.machine()}, numpy {np.__version__}; "
        f"{m} objectives, accuracies rounded to 0.01 (ties), median of {args.repeats}"
    )
    print("| runs | numpy (ms) | pure-Python Deb sort (ms) | speed-up | fronts |")
    print("|---:|---:|---:|---:|---:|")
    for n in (31, 100, 300, 1000, 3000):
        values = (rng.normal(size=(n, m)) * 5 + 50).round(2)
        rows = values.tolist()
        t_np, t_py = [], []
        for _ in range(args.repeats):  # interleaved
            t, ranks = timed(non_dominated_ranks, values, dirs)
            t_np.append(t)
            if n <= 1000:
                t2, ref = timed(deb_fast_sort, rows, dirs)
                t_py.append(t2)
                assert ranks.tolist() == ref, f"mismatch at n={n}"
        a = statistics.median(t_np) * 1e3
        b = statistics.median(t_py) * 1e3 if t_py else float("nan")
        ratio = f"{b / a:.0f}x" if t_py else "-"
        print(
            f"| {n} | {a:.2f} | {b:.1f} | {ratio} | {int(ranks.max())} |"
            if t_py
            else f"| {n} | {a:.2f} | (skipped) | - | {int(ranks.max())} |"
        )


if __name__ == "__main__":
    main()
