"""The evidence behind a ``moasha`` stop: a lower bound on the probability that one
configuration Pareto-dominates another, from per-metric gaps and their standard errors
(:mod:`lipsweep.search.schedulers.moasha`, step 3)."""

from __future__ import annotations

from typing import Optional

import numpy as np


def t_cdf(x: np.ndarray, df: float) -> np.ndarray:
    """Student's t distribution function (scipy) at ``x`` with ``df`` degrees of freedom."""
    from scipy.stats import t as student_t

    return np.asarray(student_t.cdf(x, df), dtype=float)


def dominance_probability(
    gaps: np.ndarray,
    se: np.ndarray,
    df: float | np.ndarray,
    ignore: Optional[np.ndarray] = None,
) -> np.ndarray:
    """A lower bound on the probability that each configuration dominates one
    (:mod:`lipsweep.search.schedulers.moasha`, step 3): no worse in every metric and better
    in at least one. ``gaps`` (k, m): how far each of k configurations is ahead, per metric
    (its better direction positive); ``se`` (k, m) or (m,): each gap's standard error;
    ``df``: Student's t degrees of freedom (per metric, (m,), or one; inf: normal);
    ``ignore`` (m,): metrics left out (they order nothing at the rung). Per metric,
    ``P_j = T_df(gap_j / se_j)`` that it is ahead; an exact tie with no noise (gap 0, se 0)
    is no worse for certain but not better, and leaves the sum. The bound is
    ``1 - sum_j (1 - P_j)`` over the other metrics, at least 0 (Boole's inequality: valid
    whatever the dependence between the metrics), and 0 when no metric is left to be better
    in. Infinite noise or 0 degrees of freedom: 0."""
    gaps = np.asarray(gaps, dtype=float)
    se = np.broadcast_to(np.asarray(se, dtype=float), gaps.shape)
    dfs = np.broadcast_to(np.asarray(df, dtype=float), gaps.shape[1:])
    skip = np.zeros(gaps.shape[1], bool) if ignore is None else np.asarray(ignore, bool)
    tie = (se == 0) & (gaps == 0)  # (k, m): no worse, not better
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, gaps / se, np.where(gaps > 0, np.inf, -np.inf))
    safe_df = np.where(dfs > 0, dfs, 1.0)
    p = t_cdf(z, safe_df)
    p = np.where(np.isinf(se) | (dfs <= 0)[None, :], 0.0, p)
    counted = ~tie & ~skip[None, :]
    bound = 1.0 - np.sum(np.where(counted, 1.0 - p, 0.0), axis=1)
    return np.where(counted.any(axis=1), np.maximum(0.0, bound), 0.0)
