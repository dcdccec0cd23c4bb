"""Why ``moasha`` stopped a configuration: :class:`StopReason`, its one line for the
``lipsweep.stopped_by`` tag and the log, and its form in the scheduler's state file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

SHOWN_DOMINATORS = 10  # trial ids a stop reason lists; more are counted
SHOWN_MARGINS = 3  # configurations whose margins a noise-aware stop reason spells out
SEEDS, MEASUREMENT, NONE, TIED = "seeds", "measurement", "none", "tied"
"""Where a metric's noise at a rung comes from
(:meth:`lipsweep.search.schedulers.moasha.MoAsha.rung_noise`)."""


@dataclass(frozen=True)
class StopReason:
    """Why a configuration stopped: where, what was ahead of it, by how much, against what
    noise."""

    epoch: float
    """The rung (epochs trained) at which it was judged."""
    dominated_by: tuple[str, ...]
    """A trial of each configuration that dominates it at the rung (beyond noise, where the
    sweep estimates noise), the largest margin first."""
    front: int
    """Its non-dominated front at the rung (1 = not dominated by any configuration there)."""
    ahead: int
    """Configurations ordered strictly ahead of it (front, then crowding distance)."""
    kept: int
    """How many the rung promotes: ceil(n / reduction_factor)."""
    of: int
    """Configurations recorded at the rung, itself included."""
    seeds: int = 1
    """Its seeds that had reported at the rung."""
    metrics: tuple[str, ...] = ()
    margins: tuple[tuple[float, ...], ...] = ()
    """Per dominating configuration (as ``dominated_by``), how far ahead it was per metric
    (in the metric's better direction: positive)."""
    noise: tuple[float, ...] = ()
    """Seed noise per metric (pooled standard deviation) at the rung; empty: not estimated."""
    noise_seeds: int = 0
    """Seeds at the rung the noise was estimated from."""
    noise_df: int = 0
    """Its degrees of freedom (seeds minus configurations with repeats)."""
    confidence: float = 0.0
    need: float = 0.0
    """The probability of dominance the stop needed at this look (``confidence`` spread over
    the configuration's looks and rivals: ``MoAsha.threshold``); 0: not recorded."""
    probabilities: tuple[float, ...] = ()
    """Per dominating configuration (as ``dominated_by``), a lower bound on the probability
    that it dominates (:mod:`lipsweep.search.schedulers.moasha`, step 3); empty: not estimated."""
    trend_probabilities: tuple[float, ...] = ()
    """Per dominating configuration (as ``dominated_by``), the bound on its probability of
    dominance after one rung of both configurations' trends
    (:mod:`lipsweep.search.schedulers.moasha`, step 4); empty: no trend test."""
    noise_kinds: tuple[str, ...] = ()
    """Per metric, where its noise came from: ``seeds``, ``measurement`` (the probe's own
    ``<metric>_se``) or ``tied`` (every configuration at the rung the same: left out); empty:
    seeds throughout."""

    def text(self) -> str:
        """One line for the ``lipsweep.stopped_by`` tag and the log."""
        head = f"rung at epoch {self.epoch:g}: "
        tail = f" ({self.ahead} ahead; {self.kept} of {self.of} promoted)"
        if not self.noise:
            if self.dominated_by:
                ids = list(self.dominated_by[:SHOWN_DOMINATORS])
                more = len(self.dominated_by) - len(ids)
                shown = ", ".join(ids) + (f" and {more} more" if more > 0 else "")
                return f"{head}dominated by {shown}{tail}"
            return f"{head}front {self.front}, crowded out{tail}"
        parts = []
        probs = self.probabilities or (None,) * len(self.margins)
        trends = self.trend_probabilities or (None,) * len(self.margins)
        for tid, margin, p, pt in list(zip(self.dominated_by, self.margins, probs, trends))[
            :SHOWN_MARGINS
        ]:
            by = ", ".join(f"{m} {v:+.4g}" for m, v in zip(self.metrics, margin))
            sure = "" if p is None else f"; P(dominates) >= {p:.2f}"
            sure += "" if pt is None else f", after a rung of both trends >= {pt:.2f}"
            parts.append(f"{tid} ({by}{sure})")
        more = len(self.dominated_by) - len(parts)
        shown = "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
        kinds = self.noise_kinds or (SEEDS,) * len(self.metrics)
        used = {k for k in kinds if k != TIED}
        label = (
            {SEEDS: "seed", MEASUREMENT: "measurement"}.get(next(iter(used)), "")
            if len(used) == 1
            else ""
        )
        what = f"{label} noise" if label else "noise"
        per = []
        for m, v, k in zip(self.metrics, self.noise, kinds):
            if k == TIED:
                per.append(f"{m} tied at the rung (left out)")
            else:
                per.append(f"{m} {v:.4g}" + ("" if label else f" ({k})"))
        head_noise = f"{what} ({'sd' if label == 'seed' else 'se' if label else 'sd/se'}) "
        src = f" from {self.noise_seeds} seeds (df {self.noise_df})" if SEEDS in used else ""
        beyond = f"beyond {what}"
        need = f" (this look needed P >= {self.need:.4g})" if self.need > 0 else ""
        return (
            f"{head}{self.seeds} seed{'s' if self.seeds != 1 else ''} behind, {beyond} at "
            f"{self.confidence:.0%} confidence{need}, {shown}; {head_noise}"
            f"{', '.join(per)}{src}{tail}"
        )


def reason_state(r: StopReason) -> dict[str, Any]:
    """``r`` as JSON-able values (the scheduler's state file)."""
    return {k: (list(map(list, v)) if k == "margins" else list(v)) if isinstance(v, tuple) else v
            for k, v in vars(r).items()}  # fmt: skip


def reason_from(d: Mapping[str, Any]) -> StopReason:
    """The :class:`StopReason` :func:`reason_state` wrote."""
    fields_ = {k: v for k, v in d.items()}
    for k in (
        "dominated_by", "metrics", "noise", "probabilities", "trend_probabilities", "noise_kinds"
    ):  # fmt: skip
        fields_[k] = tuple(fields_.get(k, ()))
    fields_["margins"] = tuple(tuple(m) for m in fields_.get("margins", ()))
    return StopReason(**fields_)
