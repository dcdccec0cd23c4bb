"""The built-in schedulers' factories: each builds a :class:`Decider`, a decision core and how
it groups trials, Ray-free; :mod:`lipsweep.sweep.schedulers` wraps a :class:`Decider` for Ray
Tune and the replay benchmark (:mod:`lipsweep.search.replay`) drives it directly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from lipsweep.search.schedulers.asha import AshaSettings
from lipsweep.search.schedulers.moasha import MoAsha, expected_seeds, group_key
from lipsweep.search.schedulers.moasha_settings import MoashaSettings

if TYPE_CHECKING:  # pragma: no cover
    from lipsweep.search.schedulers import SchedulerContext


@dataclass
class Decider:
    """A scheduler member as its factory builds it: the decision core (a scheduler member of
    :mod:`lipsweep.search.protocol`) and ``group_of(flat_config)``, the configuration whose
    seeds are judged together (None: each trial is judged alone)."""

    core: Any
    group_of: Optional[Callable[[Mapping[str, Any]], str]] = None

    def group(self, trial_id: str, flat: Mapping[str, Any]) -> str:
        """The configuration ``trial_id`` (of flat config ``flat``) is judged with."""
        return trial_id if self.group_of is None else self.group_of(flat)


def create_asha(settings: AshaSettings, ctx: SchedulerContext) -> Decider:
    """``asha``: :class:`MoAsha` on one metric, each trial its own configuration."""
    core = MoAsha(
        [settings.metric], [settings.mode], settings.grace_period, settings.reduction_factor,
        settings.max_t or ctx.epochs, confidence=None,
    )  # fmt: skip
    return Decider(core)


def create_moasha(settings: MoashaSettings, ctx: SchedulerContext) -> Decider:
    """``moasha``: :class:`MoAsha`, a configuration's seeds judged together."""
    core = MoAsha.from_settings(
        settings, settings.max_t or ctx.epochs, expected_seeds(ctx.trials), ctx.seeds
    )
    return Decider(core, group_key)
