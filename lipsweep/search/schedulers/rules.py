"""Rules a setting follows wherever it is given: a space's ``scheduler:`` (``asha``,
``moasha``) and ``bench-search``'s flags read the same check, so they refuse the same values."""

from __future__ import annotations

import math
from typing import Any

from lipsweep.core.config_base import INT_LIMIT, ConfigError, show

REDUCTION_FACTOR_MIN = 2
"""ASHA's eta (Li et al. 2020): rungs at ``grace_period * eta**k`` epochs, each promoting its
top ``1/eta``. Any real eta > 1 is well defined; lipsweep takes eta >= 2, the range the paper
and Tune's ASHA use, so that a rung promotes at most half of what it records."""


def check_reduction_factor(value: Any, field: str) -> float:
    """``value`` as a reduction factor: a finite real number >= 2 (ConfigError naming
    ``field`` otherwise)."""
    finite = not isinstance(value, bool) and isinstance(value, (int, float))
    if finite:
        finite = abs(value) <= INT_LIMIT if isinstance(value, int) else math.isfinite(value)
    if not finite or value < REDUCTION_FACTOR_MIN:
        raise ConfigError(
            field,
            f"must be a number >= {REDUCTION_FACTOR_MIN}, got {show(value)} (a rung "
            "promotes at most half of what it records)",
        )
    return float(value)
