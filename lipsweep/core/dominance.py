"""Pareto dominance on plain arrays: the non-dominated sort every part of lipsweep ranks with.

numpy only (no torch, no Ray), so the Pareto command, the plots and the multi-objective scheduler
share one implementation. Deb et al., "A fast and elitist multiobjective genetic algorithm:
NSGA-II", IEEE TEC 2002: fronts by non-dominated sorting (Sec. III-A).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

DIRECTIONS = ("max", "min")


def _dominance(w: np.ndarray, chunk: int = 512) -> np.ndarray:
    """dom[i, j] = run i dominates run j, for w (r, m) with larger-is-better columns."""
    r, m = w.shape
    dom = np.empty((r, r), dtype=bool)
    for s in range(0, r, chunk):  # row blocks bound the temporaries to (chunk, r)
        a = w[s : s + chunk]  # (c, m)
        no_worse = np.ones((len(a), r), dtype=bool)  # (c, r)
        better = np.zeros((len(a), r), dtype=bool)
        for k in range(m):  # one 2-D pass per objective (faster than a 3-D .all(-1))
            no_worse &= a[:, k, None] >= w[None, :, k]
            better |= a[:, k, None] > w[None, :, k]
        dom[s : s + chunk] = no_worse & better
    return dom


def non_dominated_ranks(values: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """Front rank of every row of ``values`` (n, m): 1 = non-dominated, 2 = next front, ...

    ``directions[j]`` is ``"max"`` or ``"min"`` for column j. Rows holding a NaN get rank 0 and
    take no part in the comparisons; +-inf compare as ordinary values. Identical rows share a
    rank. Vectorised dominance matrix, then peeling the fronts by dominator counts: O(n^2 m)
    time, O(n^2) memory.
    """
    v = np.asarray(values, dtype=float)
    dirs = [directions] if isinstance(directions, str) else list(directions)
    if v.ndim != 2:
        raise ValueError(f"values must be 2-D (n_runs, n_objectives), got shape {v.shape}")
    if v.shape[1] == 0 or len(dirs) != v.shape[1]:
        raise ValueError(
            f"directions must name one of {DIRECTIONS} per column: got "
            f"{len(dirs)} for {v.shape[1]} columns"
        )
    bad = [d for d in dirs if d not in DIRECTIONS]
    if bad:
        raise ValueError(f"directions must be 'max' or 'min', got {bad[0]!r}")
    ranks = np.zeros(len(v), dtype=np.int64)
    idx = np.flatnonzero(~np.isnan(v).any(axis=1))
    sign = np.where(np.asarray(dirs) == "max", 1.0, -1.0)
    dom = _dominance(v[idx] * sign)  # (r, r)
    n_dominators = dom.sum(axis=0)  # (r,)
    remaining = np.ones(len(idx), dtype=bool)
    rank = 0
    while remaining.any():
        rank += 1
        front = remaining & (n_dominators == 0)
        if not front.any():  # impossible for a strict partial order; guards an endless loop
            raise AssertionError("dominance cycle: values are not totally ordered per column")
        ranks[idx[front]] = rank
        remaining &= ~front
        n_dominators -= dom[front].sum(axis=0)
    return ranks


def crowding_distance(values: np.ndarray) -> np.ndarray:
    """Crowding distance of every row of ``values`` (n, m) within that set (NSGA-II, Deb et
    al. 2002, Sec. III-B): per objective, sort the rows; the two boundary rows get +inf, each
    inner row the gap between its two neighbours divided by the objective's range (max - min);
    the distance is the sum over objectives. A larger distance is a less crowded row.

    Pass one front: the distance only means something among mutually non-dominated rows. The
    direction of an objective does not matter (the gap is symmetric). An objective whose rows
    are all equal adds nothing; with n <= 2 every row is a boundary row (+inf). Ties in a sort
    are broken by row order (a stable sort), as in Deb et al.
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 2:
        raise ValueError(f"values must be 2-D (n_rows, n_objectives), got shape {v.shape}")
    n, m = v.shape
    dist = np.zeros(n)
    if n <= 2:
        dist[:] = np.inf
        return dist
    for k in range(m):
        order = np.argsort(v[:, k], kind="stable")  # (n,)
        col = v[order, k]
        dist[order[0]] = dist[order[-1]] = np.inf
        span = col[-1] - col[0]
        if span > 0 and np.isfinite(span):
            dist[order[1:-1]] += (col[2:] - col[:-2]) / span
    return dist
