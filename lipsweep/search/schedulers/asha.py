"""``asha``: asynchronous successive halving on one per-epoch metric, each trial alone.

Li et al., "A System for Massively Parallel Hyperparameter Tuning" (MLSys 2020). Spelled
``scheduler: {type: asha, metric: acc_clean, mode: max, grace_period: 1, reduction_factor: 2}``.
The decision core is ``moasha``'s (:class:`lipsweep.search.schedulers.moasha.MoAsha`) on the one
metric, each trial its own configuration and no noise test: a trial reaching a rung stops when
at least ``ceil(n / reduction_factor)`` of the ``n`` trials recorded there are strictly better,
as ASHA promotes the top ``1/reduction_factor``. One implementation serves the live sweep
(through the family's Tune adapter) and the replay benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from lipsweep.core import metric_names
from lipsweep.core.config_base import INT_LIMIT, ConfigError, finite, show
from lipsweep.search.schedulers.rules import check_reduction_factor


def _positive_int(val: Any) -> bool:
    return isinstance(val, int) and not isinstance(val, bool) and 1 <= val <= INT_LIMIT


@dataclass(frozen=True)
class AshaSettings:
    """``scheduler: {type: asha, ...}``: one metric, compared at each rung."""

    type: ClassVar[str] = "asha"
    metric: str = metric_names.ACC_CLEAN
    """A per-epoch metric (``acc_clean``, the losses, or a probe every trial reports)."""
    mode: str = "max"
    """``max`` or ``min``."""
    grace_period: float = 1
    """Epochs every trial runs before it can be stopped (the first rung)."""
    reduction_factor: float = 2.0
    """Rung spacing and the fraction (1/reduction_factor) promoted from each rung: a real
    number >= 2 (``rules.REDUCTION_FACTOR_MIN``)."""
    max_t: Optional[int] = None
    """Epochs of a full trial; unset: the space's ``fixed.epochs`` (default 40)."""

    def __post_init__(self) -> None:
        if self.mode not in ("max", "min"):
            raise ConfigError("scheduler.mode", f"must be max or min, got {show(self.mode)}")
        if not isinstance(self.metric, str) or not self.metric:
            raise ConfigError("scheduler.metric", f"must be a metric name, got {show(self.metric)}")
        g = self.grace_period
        if not finite(g) or g < 1:
            raise ConfigError("scheduler.grace_period", f"must be a number >= 1, got {show(g)}")
        check_reduction_factor(self.reduction_factor, "scheduler.reduction_factor")
        if self.max_t is not None and not _positive_int(self.max_t):
            raise ConfigError(
                "scheduler.max_t", f"must be a positive integer, got {show(self.max_t)}"
            )
        if self.max_t is not None and self.grace_period > self.max_t:
            raise ConfigError(
                "scheduler.max_t",
                f"must be >= grace_period ({show(self.grace_period)}), got {self.max_t}",
            )

    def check_epochs(self, epochs: int) -> None:
        """ConfigError unless the rungs fit trials of ``epochs`` epochs."""
        from lipsweep.search.schedulers.moasha_settings import check_rungs

        check_rungs(self.grace_period, self.max_t, epochs)

    def metrics_used(self) -> tuple[tuple[str, str], ...]:
        """(field, metric) pairs the space checks are reported every epoch."""
        return (("scheduler.metric", self.metric),)
