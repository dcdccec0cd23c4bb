"""Hypervolume of a set of objective vectors, relative to a reference front.

The hypervolume (Zitzler & Thiele 1998) is the measure of the region that the points
dominate and that dominates the reference point. It is computed by moocore (Fonseca, Paquete
& López-Ibáñez's algorithms), not here. The reference point is the *nadir of the reference
front* pushed outward by ``margin`` of the front's range in each objective: the nadir of all
points would let dominated junk inflate every score (on a synthetic table it let random
subsampling at 40% of the compute score 0.93; with the front's nadir it scored 0.79).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from lipsweep.core.dominance import non_dominated_ranks

MARGIN = 0.1
"""How far the reference point lies beyond the front's nadir, as a fraction of its range."""


def _as_min(points: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """``points`` (n, m) with the ``max`` objectives negated: every objective minimised."""
    sign = np.array([-1.0 if d == "max" else 1.0 for d in directions])
    return np.asarray(points, dtype=float).reshape(-1, len(sign)) * sign


def reference_point(
    front: np.ndarray, directions: Sequence[str], margin: float = MARGIN
) -> np.ndarray:
    """The reference point in minimisation form: the worst value of the non-dominated points
    of ``front`` (n, m) in each objective, plus ``margin`` times their range (or of the
    value's magnitude, at least 1e-12, where the range is 0)."""
    pts = np.asarray(front, dtype=float).reshape(-1, len(directions))
    if len(pts) == 0:
        raise ValueError("the reference front is empty")
    best = _as_min(pts[non_dominated_ranks(pts, directions) == 1], directions)
    nadir, ideal = best.max(axis=0), best.min(axis=0)
    span = nadir - ideal
    span = np.where(span > 0, span, np.maximum(np.abs(nadir), 1e-12))
    return nadir + margin * span


def hypervolume(points: np.ndarray, directions: Sequence[str], ref: np.ndarray) -> float:
    """The hypervolume of ``points`` (n, m; objectives as ``directions`` say) against ``ref``
    (minimisation form, :func:`reference_point`); points that do not dominate ``ref`` add 0."""
    import moocore

    pts = _as_min(points, directions)
    pts = pts[np.all(pts < ref, axis=1)]
    return float(moocore.hypervolume(pts, ref=ref)) if len(pts) else 0.0


def relative_hypervolume(
    points: np.ndarray, front: np.ndarray, directions: Sequence[str], margin: float = MARGIN
) -> float:
    """``hypervolume(points) / hypervolume(front)`` with the reference point of ``front``."""
    ref = reference_point(front, directions, margin)
    whole = hypervolume(front, directions, ref)
    return hypervolume(points, directions, ref) / whole if whole > 0 else 0.0
