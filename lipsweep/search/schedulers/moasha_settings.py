"""``moasha``'s settings (``scheduler: {type: moasha, ...}``), declared and checked once: the
space, the CLI, the API and ``bench-search`` all read them here; and the rung rule every
scheduler over a space's epochs obeys (:func:`check_rungs`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from lipsweep.core.config_base import INT_LIMIT, ConfigError, finite, show
from lipsweep.search.schedulers.rules import check_reduction_factor


@dataclass(frozen=True)
class MoashaSettings:
    """``scheduler: {type: moasha, ...}``: several per-epoch metrics, ranked by dominance."""

    type: ClassVar[str] = "moasha"
    metrics: tuple[str, ...] = ()
    """Per-epoch metric names: the objectives compared at each rung."""
    modes: tuple[str, ...] = ()
    """``max`` or ``min`` per metric, in the same order."""
    grace_period: int = 1
    """Epochs every trial runs before it can be stopped (the first rung), >= 1."""
    reduction_factor: float = 2.0
    """Rung spacing (and, with ``quota``, 1/reduction_factor of each rung is promoted); >= 2."""
    max_t: Optional[int] = None
    """Epochs of a full trial; unset: every trial's epochs."""
    confidence: float = 0.9
    """How sure a stop must be that a configuration ahead of it dominates it beyond noise
    (seed or measurement noise; its probability of dominance), spread over all of a
    configuration's looks (its seeds at each rung that can stop it) and, with ``rivals``, the
    configurations each look compares it with; in (0, 1)."""
    trend: bool = True
    """A stop also needs the dominator to dominate beyond noise after one rung of both
    configurations' trends (:mod:`lipsweep.search.schedulers.moasha`, step 4); the first
    rung, with no trend yet, stops nothing. False: the noise test on the rung's values alone."""
    quota: bool = False
    """A stop also needs MO-ASHA's quota: ``ceil(n / reduction_factor)`` of the rung's ``n``
    configurations ordered strictly ahead (:mod:`lipsweep.search.schedulers.moasha`, step 2).
    False: the noise (and trend) tests alone decide."""
    rivals: bool = True
    """Spread ``confidence`` over the rivals a look compares against as well: with ``n``
    configurations at the rung, each look asks ``1 - (1 - confidence) / (S R (n - 1))``, so
    the chance that any look of a configuration's run stops it wrongly, against any rival, is
    at most ``1 - confidence`` (:mod:`lipsweep.search.schedulers.moasha`, step 3). False: the
    bound holds per rival."""

    def __post_init__(self) -> None:
        metrics, modes = self.metrics, self.modes
        if isinstance(metrics, str):
            metrics = [metrics]
        if not isinstance(metrics, (list, tuple)) or not metrics:
            raise ConfigError(
                "scheduler.metrics", f"must be a list of metric names, got {show(metrics)}"
            )
        if not all(isinstance(m, str) and m for m in metrics):
            raise ConfigError("scheduler.metrics", f"must be metric names, got {show(metrics)}")
        if len(set(metrics)) != len(metrics):
            raise ConfigError("scheduler.metrics", f"names a metric twice: {show(metrics)}")
        if isinstance(modes, str):
            modes = [modes]
        if not isinstance(modes, (list, tuple)) or len(modes) != len(metrics):
            raise ConfigError(
                "scheduler.modes",
                f"needs one mode per metric ({len(metrics)}: {list(metrics)}), got {show(modes)}",
            )
        bad = [m for m in modes if m not in ("max", "min")]
        if bad:
            raise ConfigError("scheduler.modes", f"each must be max or min, got {show(bad[0])}")
        object.__setattr__(self, "metrics", tuple(metrics))
        object.__setattr__(self, "modes", tuple(modes))
        g = self.grace_period
        if isinstance(g, bool) or not isinstance(g, int) or not 1 <= g <= INT_LIMIT:
            raise ConfigError("scheduler.grace_period", f"must be an integer >= 1, got {show(g)}")
        check_reduction_factor(self.reduction_factor, "scheduler.reduction_factor")
        c = self.confidence
        if not finite(c) or not 0 < c < 1:
            raise ConfigError("scheduler.confidence", f"must be a number in (0, 1), got {show(c)}")
        for name in ("trend", "quota", "rivals"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"scheduler.{name}", f"must be true or false, got {show(getattr(self, name))}"
                )
        t = self.max_t
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t > INT_LIMIT):
            raise ConfigError("scheduler.max_t", f"must be a positive integer, got {show(t)}")
        if t is not None and t < g:
            raise ConfigError("scheduler.max_t", f"must be >= grace_period ({g}), got {show(t)}")

    def metrics_used(self) -> tuple[tuple[str, str], ...]:
        """(field, metric) pairs the space checks are reported every epoch."""
        return tuple(("scheduler.metrics", m) for m in self.metrics)

    def check_epochs(self, epochs: int) -> None:
        """ConfigError unless the rungs fit trials of ``epochs`` epochs (:func:`check_rungs`)."""
        check_rungs(self.grace_period, self.max_t, epochs)


def check_flags(grace_period: int, reduction_factor: float, confidence: float) -> None:
    """The rule's settings that ``bench-search`` takes as flags, checked by
    :class:`MoashaSettings`' own rules: ConfigError naming the flag (``confidence``, not
    ``scheduler.confidence``)."""
    try:
        MoashaSettings(
            metrics=("m",),
            modes=("max",),
            grace_period=grace_period,
            reduction_factor=reduction_factor,
            confidence=confidence,
        )
    except ConfigError as err:
        raise ConfigError(err.field.removeprefix("scheduler."), err.message) from None


def check_rungs(grace_period: float, max_t: Optional[int], epochs: int) -> None:
    """A scheduler over trials of ``epochs`` epochs must have its first rung within them
    (else it could never stop one), and no rung past them (a trial's last epoch would then be
    a rung, where it is stopped before its final report): ConfigError naming the field."""
    if max_t is not None and max_t > epochs:
        raise ConfigError(
            "scheduler.max_t",
            f"must be at most the trials' {epochs} epochs, got {max_t}: a rung at or past a "
            "trial's last epoch would stop it before its final report",
        )
    top = max_t or epochs
    if grace_period > top:
        what = "max_t" if max_t is not None else "the trials' epochs"
        raise ConfigError(
            "scheduler.grace_period",
            f"must be at most {what} ({top}), got {show(grace_period)}: the scheduler would "
            "have no rung within a trial and could never stop one",
        )
