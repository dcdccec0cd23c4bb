"""The measurement noise a probe metric carries: standard errors of one trial's one epoch.

numpy only. A per-epoch metric measured on a finite set of images has a standard error from
that set alone, whatever the seeds: ``moasha`` reads it as ``<metric>_se``
(:func:`lipsweep.core.metric_names.se_metric`) beside the metric, so it knows its evidence
in a sweep without seed repeats.

- An accuracy (percent) on ``n`` images is a binomial proportion: Agresti & Coull, "Approximate
  is better than 'exact' for interval estimation of binomial proportions", Am. Stat. 1998:
  ``p~ = (k + z^2/2) / (n + z^2)``, ``SE = 100 sqrt(p~ (1 - p~) / (n + z^2))`` with ``z``
  1.96, so 0% and 100% still have a nonzero standard error (the Wald one would be 0).
- A median over ``m`` values: the distribution-free interval of order statistics whose ranks
  are one binomial standard deviation (``sqrt(m) / 2``) either side of ``m / 2`` (Conover,
  "Practical Nonparametric Statistics", 3rd ed., 1999, Sec. 3.2), half its width.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

Z = 1.96
"""Agresti-Coull's ``z`` (the 95% interval's)."""


def accuracy_se(percent: float, n: int) -> float:
    """The Agresti-Coull standard error, in percentage points, of an accuracy of ``percent``
    on ``n`` >= 1 images (module docstring)."""
    if n < 1:
        raise ValueError(f"an accuracy needs at least one image, got n = {n}")
    k = percent / 100.0 * n
    big_n = n + Z * Z
    p = (k + Z * Z / 2) / big_n
    return 100.0 * math.sqrt(p * (1 - p) / big_n)


def median_se(values: Sequence[float]) -> float:
    """The order-statistic standard error of the median of ``values`` (module docstring):
    half the gap between the order statistics of ranks ``m/2 -+ sqrt(m)/2``; 0 for one value."""
    x = np.sort(np.asarray(values, dtype=float))
    m = len(x)
    if m == 0:
        raise ValueError("the median of no values")
    half = math.sqrt(m) / 2
    lo = max(0, math.floor(m / 2 - half))
    hi = min(m - 1, math.ceil(m / 2 + half) - 1)
    return float(x[hi] - x[lo]) / 2.0
